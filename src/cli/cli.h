/* cli.h — shared pieces of the g4tp subcommands: option parsing helpers, engine options from
 * flags and environment, and the command table. Each subcommand lives in its own cmd_*.c. */
#ifndef G4_CLI_H
#define G4_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "g4.h"
#include "engine/sampler.h"

int cmd_generate(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_shard(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* argv[*i] is the flag; returns its value (argv[*i+1]) and advances, or prints an error. */
const char *cli_value(int argc, char **argv, int *i);
int cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
/* Parses "2,105,17" into ids (malloc'd). */
int cli_ids(const char *flag, const char *s, int32_t **ids, int *n);
/* Engine flags shared by every command that loads a model: --model --tp --threads --comm
 * --dtype --max-batch --max-ctx --kv-budget-mb --verify. Returns 1 if argv[*i] was one. */
int cli_engine_flag(int argc, char **argv, int *i, g4_engine_opts *o, int *bad);
extern const char *cli_engine_help;

/* Sampling flags shared by run and chat: --temperature --top-k --top-p --min-p --seed. */
typedef struct cli_sampling { double temperature, top_p, min_p; long long top_k, seed; } cli_sampling;
void cli_sampling_init(cli_sampling *s);
int cli_sampling_flag(int argc, char **argv, int *i, cli_sampling *s, int *bad);
/* Overrides the generation_config.json defaults in p with the flags given. */
void cli_sampling_apply(const cli_sampling *s, g4_sampling_params *p);
extern const char *cli_sampling_help;
/* The built-in demo model folder ($G4_DEMO_MODEL, else models/demo beside the binary's repository,
 * else <prefix>/share/g4tp/models/demo for an installed <prefix>/bin/g4tp). */
const char *cli_default_model(void);
void cli_error(const char *cmd, const g4_err *err);

#endif
