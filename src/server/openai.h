/* openai.h — the OpenAI-compatible request and response shapes: parsing and validating the
 * bodies of /generate, /v1/completions and /v1/chat/completions into one request struct, and
 * building the response objects from a finished generation. Pure functions of JSON and text:
 * no HTTP, no engine. Streaming chunks are built on top of these (openai_sse.c). */
#ifndef G4_SERVER_OPENAI_H
#define G4_SERVER_OPENAI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/penalty.h"
#include "server/api_images.h"
#include "server/errors.h"
#include "text/output_parser.h"

/* Every API translates into this one request shape and out of one result shape: OpenAI's here,
 * Anthropic's Messages in anthropic.h, OpenAI's Responses in responses.h; api_family.h has the
 * table of them (route, parser, renderer, stream shape, error body). */
typedef enum { G4_API_GENERATE = 0, G4_API_COMPLETIONS, G4_API_CHAT, G4_API_ANTHROPIC, G4_API_RESPONSES } g4_api_kind;

#define G4_API_MAX_STOPS 16
#define G4_API_MAX_N 16       /* choices per request (each is a sequence of its own) */
#define G4_API_MAX_PROMPTS 1024 /* completions: prompts in one request (a batch) */

/* One prompt of a completions batch: text (len bytes) or token ids. */
typedef struct g4_api_prompt {
    char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
} g4_api_prompt;

typedef struct g4_api_request {
    g4_api_kind kind;
    json_t *chat;             /* to render with the chat template (NULL: prompt text or ids) */
    char *prompt;             /* raw prompt text (completions, raw /generate) */
    size_t prompt_len;
    int32_t *prompt_ids;      /* completions given as token ids */
    size_t n_prompt_ids;
    g4_api_prompt *batch;     /* completions given several prompts (n_batch >= 2; then prompt and prompt_ids are NULL) */
    size_t n_batch;
    int add_special;          /* encode the raw prompt with the tokenizer's post-processor */
    int parse_output;         /* split reasoning / content / tool calls (chat, templated /generate) */
    int64_t max_tokens;       /* -1: not given */
    int has_temperature, has_top_p, has_top_k, has_min_p, has_seed;
    double temperature, top_p, min_p;
    int top_k;
    uint64_t seed;
    /* penalties (engine/penalty.h): zero when absent; repetition_penalty 0 = not given */
    double presence_penalty, frequency_penalty, repetition_penalty;
    int64_t min_tokens;
    g4_logit_bias *logit_bias; /* [n_logit_bias] sorted by id, distinct (owned); ids checked
                                       * against the vocabulary where it is known (generate.c) */
    size_t n_logit_bias;
    char *stops[G4_API_MAX_STOPS];
    size_t n_stops;
    int stream, include_usage;
    int ignore_eos;           /* vLLM's extension: keep generating past end-of-sequence ids */
    int speculative;          /* "speculative": 0 the server's drafter, -1 none (false / 0), 1..15 at most that many drafts */
    char *model;              /* NULL when absent; may hold U+0000 (model_len bytes) */
    size_t model_len;
    int n;                    /* choices, 1..G4_API_MAX_N */
    int logprobs;             /* report each generated token's logprob */
    int top_logprobs;         /* ... with this many alternatives (0..20) */
    int echo;                 /* completions: the prompt's text (and with logprobs its tokens') first */
    json_t *extra;            /* Anthropic / Responses: request fields their answers repeat (owned) */
    /* what the output must be: compiled into a grammar below the server (grammar/grammar.h,
     * docs/structured-output.md); zero is free text, tools "auto", parallel calls allowed */
    int out_format;           /* g4_out_format: text, json_object, json_schema, regex, choice */
    json_t *out_schema;       /* json_schema: the schema (owned) */
    char *out_regex;          /* regex: the pattern (out_regex_len bytes, owned) */
    size_t out_regex_len;
    json_t *out_choices;      /* choice: the strings (owned) */
    int guided;               /* the format came from vLLM's guided_* fields (errors name them) */
    int tool_mode;            /* g4_tool_mode: auto, none, required, named */
    char *tool_name;          /* named: the function */
    json_t *tools;            /* the tools, OpenAI-shaped [{type, function:{name, parameters}}] (owned) */
    int no_parallel_tool_calls; /* 1: at most one call ("parallel_tool_calls": false) */
    int strict_tools;         /* a function has "strict": true: its calls follow its schema under "auto" too */
    g4_api_images images;     /* the conversation's images, in the order the template renders them */
} g4_api_request;

/* The grammar of what q asks of its output (*out NULL: free text), for a prompt that ends
 * inside a thought block when thought is set, with the default limits. A schema the compiler
 * refuses is a 400 naming the field (response_format.json_schema.schema, json_schema,
 * tools[i].function.parameters, guided_json, ...). */
struct g4_grammar;
int g4_api_constraint(const g4_api_request *q, int thought, struct g4_grammar **out, g4_api_err *ae);
/* The same through a cache of compiled grammars (NULL: none) within limits (NULL: the defaults),
 * with the compile's stats (may be NULL); grammar/grammar.h. A compile past a limit is a 400
 * naming it; past the shared budget a 503; cancelled G4_ECANCELED. */
struct g4_grammar_cache;
struct g4_grammar_limits;
struct g4_grammar_compile_stats;
int g4_api_constraint_cached(const g4_api_request *q, int thought, struct g4_grammar_cache *cache, const struct g4_grammar_limits *lim,
                             struct g4_grammar_compile_stats *st, struct g4_grammar **out, g4_api_err *ae);
/* 1 when q's output is constrained (a grammar is compiled for it). */
int g4_api_constrains(const g4_api_request *q);
/* Stop strings (stop_field: "stop", "stop_sequences") would cut constrained JSON or tool calls
 * into something invalid: with a JSON / regex / choice format or required / named tool calls
 * they are refused (400 naming the field). */
int g4_api_check_stops(const g4_api_request *r, const char *stop_field, g4_api_err *ae);

/* Parses and validates a body. 400-class errors name the field in ae->param. */
int g4_api_parse(g4_api_kind kind, const char *body, size_t len, g4_api_request *out, g4_api_err *ae);
void g4_api_request_free(g4_api_request *r);

/* Field readers shared by every API's translation: absent or null leaves *has 0 (and *out as
 * it was), a wrong type or range is a 400 naming the field. stops: a list of up to
 * G4_API_MAX_STOPS non-empty strings without U+0000 (string_ok: or one string) into r->stops. */
int g4_api_field_number(const json_t *o, const char *k, double lo, double hi, int *has, double *out, g4_api_err *ae);
int g4_api_field_int(const json_t *o, const char *k, long long lo, long long hi, int *has, long long *out, g4_api_err *ae);
int g4_api_field_bool(const json_t *o, const char *k, int *out, g4_api_err *ae);
int g4_api_field_string(const json_t *o, const char *k, const char **out, g4_api_err *ae);
int g4_api_field_stops(const json_t *o, const char *k, int string_ok, g4_api_request *r, g4_api_err *ae);
/* The sampling fields beyond temperature / top_p that every API takes (OpenAI's and vLLM's
 * names; extensions in Anthropic's Messages and OpenAI's Responses): presence_penalty and
 * frequency_penalty in [-2, 2], repetition_penalty > 0, logit_bias {"id": bias in [-100, 100]},
 * min_tokens >= 0, seed (any 64-bit integer). */
int g4_api_field_penalties(const json_t *o, g4_api_request *r, g4_api_err *ae);

/* Tool selection, shared by the translations: tools OpenAI-shaped (or NULL), mode a
 * g4_tool_mode, name the function of G4_TOOLS_NAMED. "required" and named need tools and a
 * named one must be among them (400s on 'tool_choice'); r keeps the tools for the grammar. */
int g4_api_set_tools(g4_api_request *r, json_t *tools, int mode, const char *name, int parallel, g4_api_err *ae);
/* A structured-output format object {name, schema, strict?, description?} (and the key also,
 * e.g. Responses' "type") at where: checked, its schema kept as r's json_schema format. */
int g4_api_schema_format(const json_t *js, const char *where, const char *also, g4_api_request *r, g4_api_err *ae);
/* A function name Gemma's call syntax can carry: no white space, none of {}[]<>,"'(). */
int g4_api_tool_name_ok(const json_t *name);

/* Parses a JSON body that must be an object (for /tokenize, /detokenize). *out: new ref. */
int g4_api_parse_object(const char *body, size_t len, json_t **out, g4_api_err *ae);

/* Checks an OpenAI `messages` array and returns a copy ready for the chat template (tool call
 * arguments given as JSON strings become objects, as the template wants). *out: new ref. */
int g4_api_messages(const json_t *messages, json_t **out, g4_api_images *images, g4_api_err *ae);

/* The parsed output of a whole generation with the lengths g4_parsed_output lacks: generated
 * text may hold U+0000, so po.content and po.reasoning hold content_len / reasoning_len bytes
 * (NUL-terminated after them too). */
typedef struct g4_api_output {
    g4_parsed_output po;
    size_t content_len, reasoning_len;
} g4_api_output;

/* The output parser over a whole text (what the streaming form gives, lengths kept). */
int g4_api_parse_output(const char *text, size_t len, int start_in_thought, g4_api_output *out, g4_err *err);
void g4_api_output_free(g4_api_output *o);

/* One finished generation, as the renderers need it. */
typedef struct g4_api_result {
    const char *id;           /* "chatcmpl-…", "cmpl-…" */
    const char *model;
    long long created;
    const char *text;         /* the generated text (completions, /generate raw) */
    size_t text_len;
    const g4_api_output *parsed; /* chat and templated /generate: parsed output */
    const char *finish_reason;/* "stop", "length" (tool_calls is derived) */
    size_t prompt_tokens, completion_tokens;
    size_t cached_tokens;     /* prompt tokens from the prefix cache */
    double ttft_ms, tokens_per_s;
    int index;                /* the choice (n > 1) */
    json_t *logprobs;         /* borrowed: the choice's "logprobs" (NULL: null) */
    const char *stop_sequence;/* the stop string that ended it, if one did */
    int new_prompt;           /* a batch: the first choice of its prompt (usage counts its prompt) */
} g4_api_result;

/* "tool_calls" when the output has calls and generation stopped, else finish_reason. */
const char *g4_api_finish_reason(const g4_api_result *r);
json_t *g4_api_chat_response(const g4_api_result *r);
json_t *g4_api_completion_response(const g4_api_result *r);
/* n choices r[0..n): the envelope from r[0]; usage: the prompt of r[0] and of every r[i] with
 * new_prompt (a batch), completion tokens summed. */
json_t *g4_api_chat_response_n(const g4_api_result *r, size_t n);
json_t *g4_api_completion_response_n(const g4_api_result *r, size_t n);
json_t *g4_api_generate_response(const g4_api_result *r);
/* Streaming a call's arguments in pieces (after each top-level member): writes the end offsets
 * of the pieces of json[0..len) into ends (up to max) and returns how many pieces there are;
 * the pieces concatenate to the whole text. */
size_t g4_api_args_pieces(const char *json, size_t len, size_t *ends, size_t max);
/* {"id","type","function":{"name","arguments"}} for call k of a response. */
json_t *g4_api_tool_call(const char *resp_id, size_t k, const g4_tool_call *c);
/* The usage object; prompt_tokens_details.cached_tokens: prompt tokens from the prefix cache. */
json_t *g4_api_usage(size_t prompt_tokens, size_t completion_tokens, size_t cached_tokens);

/* OpenAI's stream shape (openai_sse.c, sse.h): chat.completion.chunk (g4_sse_opts.kind
 * G4_API_CHAT) or text_completion chunks, n choices, logprobs, usage, [DONE]. */
struct g4_sse_shape;
extern const struct g4_sse_shape g4_openai_sse_shape;

#endif
