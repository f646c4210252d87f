/* The tokenizer's test text (mixed_text.h): pieces drawn from lists of
 * words, whitespace, numbers, code and special tokens by a small
 * counter-based generator, so that the same (size, seed, flags) always
 * gives the same bytes. */
#include "mixed_text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gen {
    char *s;
    size_t len, cap;
    uint64_t state;
    unsigned flags;
    int oom;
} gen;

static uint64_t next(gen *g) { /* splitmix64 */
    uint64_t z = (g->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned below(gen *g, unsigned n) { return (unsigned)(next(g) % n); }

static void put(gen *g, const char *s, size_t n) {
    if (g->oom) return;
    if (g->len + n + 1 > g->cap) {
        size_t cap = g->cap * 2;
        while (cap < g->len + n + 1)
            cap *= 2;
        char *p = realloc(g->s, cap);
        if (!p) {
            g->oom = 1;
            return;
        }
        g->s = p;
        g->cap = cap;
    }
    memcpy(g->s + g->len, s, n);
    g->len += n;
    g->s[g->len] = 0;
}

static void puts_(gen *g, const char *s) { put(g, s, strlen(s)); }

/* One code point as UTF-8. */
static void put_cp(gen *g, unsigned cp) {
    char b[4];
    size_t n;
    if (cp < 0x80)
        b[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
        b[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    else
        b[0] = (char)(0xf0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), b[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
    put(g, b, n);
}

#define COUNT(a) (sizeof(a) / sizeof *(a))
#define PICK(g, a) (a)[below(g, (unsigned)COUNT(a))]

/* the lists stay dense: one string a line would be ten pages */
// clang-format off
static const char *const english[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "with", "as", "was", "on", "be", "by", "this",
    "tokenizer", "pipeline", "gradient", "microbatch", "schedule", "training", "language", "model", "weights",
    "Hello", "World", "The", "A", "In", "However", "Therefore", "GPT", "LLaMA", "JSON", "HTTP", "NASA",
    "rank", "stage", "loss", "bubble", "forward", "backward", "interleaved", "antidisestablishmentarianism",
    "naïve", "café", "résumé", "coöperate", "façade", "jalapeño", "Zürich", "straße", "Ærøskøbing", "œuvre",
    "camelCase", "snake_case", "kebab-case", "SCREAMING_CASE", "x", "I", "a", "Mr", "Dr", "e.g", "i.e",
};
static const char *const contractions[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE",
                                           "'M", "'LL", "'D", "'Re", "'rE", "'vE", "'Ll", "'lL", "n't", "N'T",
                                           "'", "''", "'x", "'sss", "'ll've", "\xe2\x80\x99s", "\xe2\x80\x99t"};
static const char *const foreign[] = {
    "Καλημέρα", "κόσμε", "ΑΘΗΝΑ", "Здравствуйте", "мир", "ПРИВЕТ", "Ёлка", "مرحبا", "بالعالم", "العربية",
    "שלום", "עולם", "नमस्ते", "दुनिया", "हिन्दी", "สวัสดี", "ภาษาไทย", "你好", "世界", "中文分词测试",
    "こんにちは", "カタカナ", "ひらがな", "漢字", "안녕하세요", "세계", "한국어", "Việt", "Tiếng", "Nguyễn",
    "Ελληνικά", "Україна", "Ґанок", "ქართული", "Հայերեն", "ትግርኛ", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "ગુજરાતી",
    "বাংলা", "ਪੰਜਾਬੀ", "සිංහල", "ພາສາລາວ", "ខ្មែរ", "မြန်မာ", "ᠮᠣᠩᠭᠣᠯ", "Ⲙⲉⲧⲣⲉⲙ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "𝐁𝐨𝐥𝐝", "𐌰𐌱𐌲", "𠀀𠀁", "e\xcc\x81te\xcc\x81", "n\xcc\x83", "A\xcc\x8a", "ﬁnance", "ǅungla",
    "ﬀ", "Ⅻ", "ǈ", "µ", "ªº", "ŉ",
};
static const char *const emoji[] = {
    "😀", "🚀", "🎉", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵🇺🇸", "❤️", "☺️", "🧑🏿‍🚀", "🏳️‍🌈",
    "1️⃣", "#️⃣", "✨", "🔥🔥🔥", "🤖", "💯", "🙂🙃", "©", "®", "™", "→", "∑", "∞", "≠", "√", "☃", "♪",
};
static const char *const spaces[] = {
    " ", "  ", "   ", "    ", "        ", "\t", "\t\t", " \t", "\t ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
    " \n", "  \n", "\n ", "\n  ", "\n\t", " \t \n ", "\r", "\xc2\xa0", "\xe3\x80\x80", "\xe2\x80\x83",
    "\xe2\x80\x89", "\xe2\x80\xaf", "\xe2\x80\xa8", "\xe2\x80\xa9", "\x0b", "\x0c", "\xe1\x9a\x80", " \xc2\xa0 ",
};
static const char *const unsafe_js[] = {"\xc2\x85", "\xef\xbb\xbf", "it'\xc5\xbf", "\xc2\x85 ", " \xef\xbb\xbf"};
static const char *const numbers[] = {
    "0", "7", "42", "123", "1234", "12345", "2024", "3.14159", "2.71828", "1,000,000", "1e-9", "0x1F", "0b1010",
    "99.9%", "$100", "€50", "£3.50", "¥1000", "12:30", "2026-11-26", "+1-555-0100", "v1.2.3", "4th", "21st",
    "٣٤٥", "١٢٣٤٥٦", "１２３", "²", "³⁴", "½", "¾", "Ⅳ", "०१२३", "๑๒๓", "〇", "①②",
};
static const char *const code[] = {
    "int main(int argc, char **argv) {\n    return 0;\n}\n",
    "for (size_t i = 0; i < n; i++) {\n\tsum += a[i] * b[i];\n}\n",
    "def f(x):\n    if x is None:\n        return []\n    return [y ** 2 for y in x]\n",
    "const xs = [1, 2, 3].map((x) => x * 2); // doubled\n",
    "if (a !== b && c >= d || !e) { throw new Error(`bad ${a}`); }\n",
    "std::vector<int> v{1, 2, 3}; auto it = v.begin(); ++it;\n",
    "/* a comment */ #include <stdio.h>\n#define MAX(a, b) ((a) > (b) ? (a) : (b))\n",
    "{\"name\": \"mpmd\", \"version\": [0, 1, 0], \"ok\": true, \"nested\": {\"x\": null}}\n",
    "https://example.com/path/to/file.html?query=1&other=two#frag",
    "SELECT id, name FROM users WHERE age > 21 ORDER BY name DESC;\n",
    "x <<= 2; y >>>= 1; z **= 3; a ?? b; c?.d; e::f; g->h; i => j;\n",
    "    \t  mixed_indent();\n\t    other();\n",
    "<div class=\"a\">&amp; &lt;tag&gt;</div>\n",
    "$ ls -la | grep '\\.c$' > out.txt 2>&1\n",
    "fn main() { let s: &str = \"héllo\"; println!(\"{}\", s); }\n",
    "====================", "--------", "!!!???", "...", "…", "—", "–", "«»", "„“", "¿¡", "()", "[]{}",
};
static const char *const specials[] = {
    "<|endoftext|>", "<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
    "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_5|>", "<|endoftext", "<|endoftext|",
    "endoftext|>", "<|end_of_text|><|endoftext|>", "<|<|endoftext|>|>", "<|im_start|>", "< |endoftext| >",
};
static const char *const controls[] = {"\x01", "\x1f", "\x7f", "\xef\xbf\xbd", "\xee\x80\x80", "\xe2\x80\x8b",
                                       "\xe2\x80\x8d", "\xef\xb8\x8f", "\x00", "\xf4\x8f\xbf\xbd"};

// clang-format on

static void word(gen *g) {
    const char *w = PICK(g, english);
    unsigned style = below(g, 10);
    if (style == 0) {                      /* all capitals */
        for (const char *p = w; *p; p++) { /* ASCII capitalised, other bytes as they are */
            char c = *p >= 'a' && *p <= 'z' ? (char)(*p - 32) : *p;
            put(g, &c, 1);
        }
    } else if (style == 1 && w[0] >= 'a' && w[0] <= 'z') { /* capitalised */
        put_cp(g, (unsigned)(w[0] - 32));
        puts_(g, w + 1);
    } else {
        puts_(g, w);
    }
}

static void piece(gen *g) {
    unsigned k = below(g, 100);
    if (k < 30) { /* a sentence of English with contractions */
        unsigned n = 3 + below(g, 12);
        for (unsigned i = 0; i < n; i++) {
            if (i) puts_(g, below(g, 12) ? " " : PICK(g, spaces));
            word(g);
            if (!below(g, 6)) puts_(g, PICK(g, contractions));
            if (!below(g, 10)) puts_(g, below(g, 2) ? "," : ";");
        }
        puts_(g, below(g, 4) ? ". " : below(g, 2) ? "?\n" : "!\n");
    } else if (k < 50) { /* foreign words */
        unsigned n = 1 + below(g, 8);
        for (unsigned i = 0; i < n; i++) {
            puts_(g, PICK(g, foreign));
            puts_(g, below(g, 5) ? " " : below(g, 2) ? "" : "、");
        }
    } else if (k < 58) {
        puts_(g, PICK(g, emoji));
        if (below(g, 2)) puts_(g, " ");
    } else if (k < 68) {
        puts_(g, PICK(g, spaces));
    } else if (k < 76) { /* numbers, some long */
        if (below(g, 4) == 0) {
            unsigned n = 5 + below(g, 40);
            for (unsigned i = 0; i < n; i++)
                put_cp(g, '0' + below(g, 10));
        } else {
            puts_(g, PICK(g, numbers));
        }
        puts_(g, below(g, 3) ? " " : "");
    } else if (k < 88) {
        puts_(g, PICK(g, code));
    } else if (k < 92) {
        puts_(g, PICK(g, specials));
    } else if (k < 94) {
        const char *c = PICK(g, controls);
        put(g, c, *c ? strlen(c) : 1); /* "\x00" is one NUL byte */
    } else if (k < 95 && !(g->flags & MIXED_TEXT_JS_SAFE)) {
        puts_(g, PICK(g, unsafe_js));
    } else if (k < 97) { /* a long run of one kind: letters, digits, punctuation or spaces */
        unsigned n = 200 + below(g, 400), kind = below(g, 5);
        for (unsigned i = 0; i < n; i++) {
            switch (kind) {
            case 0: put_cp(g, 'a' + below(g, 26)); break;
            case 1: put_cp(g, '0' + below(g, 10)); break;
            case 2: put_cp(g, (unsigned)"=-*#~_"[below(g, 6)]); break;
            case 3: put_cp(g, below(g, 8) ? ' ' : '\t'); break;
            default: put_cp(g, 0x4e00 + below(g, 500)); break; /* CJK ideographs, no spaces */
            }
        }
        puts_(g, " ");
    } else { /* mixed-case identifiers and apostrophes at word starts */
        static const char *const odd[] = {"'s",     "'tis",       "O'Neil", "rock'n'roll", "isn't",
                                          "ISN'T",  "y'all",      "'90s",   "it's'",       "XMLHttpRequest",
                                          "iPhone", "McDonald's", "ABCdef"};
        puts_(g, PICK(g, odd));
        puts_(g, " ");
    }
}

char *mixed_text(size_t bytes, uint64_t seed, unsigned flags, size_t *len) {
    gen g = {0};
    g.cap = bytes + 4096;
    g.s = malloc(g.cap);
    if (!g.s) return NULL;
    g.s[0] = 0;
    g.state = seed * 0x2545f4914f6cdd1dull + 1;
    g.flags = flags;
    while (g.len < bytes && !g.oom)
        piece(&g);
    if (g.oom) {
        free(g.s);
        return NULL;
    }
    if (len) *len = g.len;
    return g.s;
}
