/* tokenize.h - the `mpmd tokenize` command (tools/tokenize.c). */
#ifndef MPMD_TOOL_TOKENIZE_H
#define MPMD_TOOL_TOKENIZE_H

/* Run `mpmd tokenize ...` (argv[1] is "tokenize"); returns the exit status. */
int tool_tokenize(int argc, char **argv);

#endif
