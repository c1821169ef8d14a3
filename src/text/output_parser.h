/* output_parser.h — splits the text of one generated Gemma-4 model turn into reasoning (the
 * thinking channel), the answer, and tool calls; whole-text and streaming forms.
 *
 * Input: text decoded WITH special tokens kept, so the markers are visible:
 *   <|channel>thought\n ... <channel|>           reasoning (several blocks are concatenated)
 *   <|tool_call>call:NAME{k:v,...}<tool_call|>  a tool call; strings <|"|>...<|"|>, numbers,
 *                                               true/false/null bare, nested {...} and [...],
 *                                               keys bare (or <|"|>quoted<|"|>)
 *   <turn|>, <eos>, <|tool_response>            end of the turn: stripped, and anything after
 *                                               the first of them is ignored
 * Reasoning and content are each trimmed of leading and trailing white space (' ', \t, \r, \n)
 * as a whole. A tool call that does not parse, or that a turn end cuts, is not dropped: its raw
 * text (markers included) becomes part of the content and `malformed` is counted, with a
 * message. A call the text itself ends inside (generation cut by max_tokens or a stop string)
 * is dropped — neither a call nor content, so that no markup reaches the answer — and
 * `truncated` says so.
 * Keys and strings must be valid UTF-8, and a key holding U+0000 makes the call malformed
 * (jansson reads no NUL in an object key); U+0000 in a string value is kept (written \u0000:
 * read it back with JSON_ALLOW_NUL). An integer too big for 64 bits is kept as a real (written
 * with ".0"), since jansson refuses integers it cannot hold.
 * Everything else (other special tokens, stray markers) is content, verbatim.
 *
 * The streaming form gives the same result: the concatenation of all reasoning deltas equals
 * the whole-text reasoning, likewise content, and the tool-call events come in the same order
 * with the same calls, however the text is split into deltas. It holds back text that may be
 * the start of a marker (and trailing white space) until it knows. */
#ifndef G4_TEXT_OUTPUT_PARSER_H
#define G4_TEXT_OUTPUT_PARSER_H

#include <jansson.h>
#include <stddef.h>

#include "base/error.h"

typedef struct {
    char *name;            /* the function name after "call:" (no NUL, white space or markup) */
    char *arguments_json;  /* compact JSON object text, for OpenAI's `arguments`; jansson
                            * reads it back (JSON_ALLOW_NUL; flags 0 unless a string value
                            * holds U+0000) as an object equal to `arguments` */
    json_t *arguments;     /* the same object as jansson (owned; json_decref on free) */
} g4_tool_call;

/* reasoning and content are the model's text as generated: they may contain NUL bytes (a
 * byte-fallback token), so use the lengths, not strlen. */
typedef struct {
    char *reasoning;       /* never NULL; "" when the model did not think */
    char *content;         /* never NULL; "" when there is no answer text */
    size_t reasoning_len, content_len;
    g4_tool_call *calls;
    size_t n_calls;
    int malformed;         /* tool-call blocks that were returned as content */
    char *malformed_msg;   /* NULL, or why the first malformed block was rejected */
    int ended;             /* 1 when a <turn|>, <eos> or <|tool_response> ended the text */
    int truncated;         /* 1 when the text ended inside a tool call (dropped) */
} g4_parsed_output;

typedef struct {
    /* The text starts inside a thought block, e.g. when the prompt ended with
     * "<|channel>thought\n" (thinking on, continuing after a tool response). */
    int start_in_thought;
} g4_output_parse_opts;

/* Whole-text parse. Only fails on NULL arguments or out of memory; bad markup is content.
 * On failure *out is zeroed. */
int g4_output_parse(const char *text, size_t len, g4_parsed_output *out, g4_err *err);
int g4_output_parse_ex(const char *text, size_t len, const g4_output_parse_opts *opts,
                       g4_parsed_output *out, g4_err *err);
void g4_parsed_output_free(g4_parsed_output *o);

/* Parses the inside of one tool-call block ("call:NAME{...}", without the markers) into a
 * call. G4_EFORMAT with a message saying where, on bad syntax. */
int g4_tool_call_parse(const char *body, size_t len, g4_tool_call *out, g4_err *err);
void g4_tool_call_free(g4_tool_call *c);

/* ---- streaming ---- */

typedef enum { G4_OUT_REASONING = 0, G4_OUT_CONTENT = 1, G4_OUT_TOOL_CALL = 2 } g4_out_kind;

typedef struct {
    g4_out_kind kind;
    const char *text;          /* REASONING / CONTENT: the delta (not NUL-terminated) */
    size_t len;
    const g4_tool_call *call;  /* TOOL_CALL: the completed call */
    size_t call_index;         /* TOOL_CALL: 0-based index among the calls of this output */
} g4_out_event;

typedef struct g4_output_stream g4_output_stream;

int g4_output_stream_create(const g4_output_parse_opts *opts, g4_output_stream **out, g4_err *err);
void g4_output_stream_free(g4_output_stream *s);
/* Feeds a delta; *events / *n_events get this call's events (consecutive text of one kind is
 * merged), valid until the next feed/finish/free. Fails only on out of memory. */
int g4_output_stream_feed(g4_output_stream *s, const char *delta, size_t len,
                          const g4_out_event **events, size_t *n_events, g4_err *err);
/* End of generation: decides everything still held back (a call the text ends inside is
 * dropped). Feeding after finish is an error (G4_EINVAL). */
int g4_output_stream_finish(g4_output_stream *s, const g4_out_event **events, size_t *n_events,
                            g4_err *err);
/* Moves the accumulated whole result (as g4_output_parse would give) into *out; call after
 * finish. The stream stays valid but empty of results. */
int g4_output_stream_take(g4_output_stream *s, g4_parsed_output *out, g4_err *err);

#endif
