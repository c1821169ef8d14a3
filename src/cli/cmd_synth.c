/* cmd_synth.c — `g4tp synth`: writes a random-weight checkpoint shaped like a config.json
 * (model/synth.h), for benchmarks and tests of loading and sharding at real widths. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model/synth.h"
#include "model/synth_assistant.h"

static const char *help =
    "usage: g4tp synth --like CONFIG_JSON --out DIR [--layers L] [--seed S] [--shard-mb MB] [--format F]\n"
    "                  [--vision]\n\n"
    "Writes DIR/config.json, DIR/model-*.safetensors and DIR/model.safetensors.index.json with\n"
    "random weights (deterministic from the seed) and the real tensor names and shapes.\n"
    "  --like CONFIG_JSON  the config to copy (e.g. tests/data/spec/gemma-4-31B-it.config.json)\n"
    "  --out DIR           output folder (created if missing)\n"
    "  --layers L          keep only the first L layers (the last one is made full attention)\n"
    "  --seed S            random seed (default 0)\n"
    "  --shard-mb MB       largest safetensors file in MB (default 2000)\n"
    "  --format F          bf16 (default): bf16 ~ N(0, 0.02); qat-q4_0: bf16 matrices on the Q4_0\n"
    "                      grid (like google/gemma-4-31B-it-qat-q4_0-unquantized); w4a16: compressed-\n"
    "                      tensors pack-quantized int4 matrices, groups of 32 (like ...-qat-w4a16-ct).\n"
    "                      The embedding (tied head) is bf16 in every format.\n"
    "  --vision            also the config's vision tower (bf16, the real names, all of vision_config's\n"
    "                      layers) and DIR/processor_config.json; without it the folder has no tower\n"
    "                      and loads text-only\n"
    "\n"
    "       g4tp synth --assistant --like TARGET_CONFIG_JSON --out DIR [--hidden H] [--intermediate I]\n"
    "                  [--layers L] [--seed S]\n\n"
    "Writes a random-weight Gemma-4 MTP assistant (Gemma4AssistantForCausalLM, the layout of\n"
    "google/gemma-4-31B-it-assistant) for that target: DIR/config.json and DIR/model.safetensors,\n"
    "bf16; the target's attention geometry and vocabulary, hidden H (default 1024), FFN I (default\n"
    "8 x H), L layers (default 4: three sliding, one full). For --speculative mtp:DIR.\n";

int cmd_synth(int argc, char **argv) {
    g4_synth_opts o = {0};
    g4_synth_asst_opts ao = {0};
    long long x;
    int bad = 0, asst = 0;
    for (int i = 1; i < argc && !bad; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(help, stdout); return 0; }
        if (!strcmp(a, "--like")) { if (!(o.like = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--out")) { if (!(o.out_dir = cli_value(argc, argv, &i))) bad = 1; }
        else if (!strcmp(a, "--layers")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 4096, &x)) bad = 1; else o.layers = (int)x; }
        else if (!strcmp(a, "--seed")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 0, INT64_MAX, &x)) bad = 1; else o.seed = (uint64_t)x; }
        else if (!strcmp(a, "--shard-mb")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 30, &x)) bad = 1; else o.shard_bytes = (uint64_t)x * 1000 * 1000; }
        else if (!strcmp(a, "--assistant")) asst = 1;
        else if (!strcmp(a, "--vision")) o.vision = 1;
        else if (!strcmp(a, "--hidden")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 32, 1 << 16, &x)) bad = 1; else ao.hidden = x; }
        else if (!strcmp(a, "--intermediate")) { if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 20, &x)) bad = 1; else ao.intermediate = x; }
        else if (!strcmp(a, "--format")) {
            if (!(v = cli_value(argc, argv, &i))) bad = 1;
            else if (!strcmp(v, "bf16")) o.format = G4_SYNTH_BF16;
            else if (!strcmp(v, "qat-q4_0")) o.format = G4_SYNTH_Q4GRID;
            else if (!strcmp(v, "w4a16")) o.format = G4_SYNTH_W4A16;
            else { fprintf(stderr, "g4tp synth: unknown format \"%s\" (bf16, qat-q4_0, w4a16)\n", v); bad = 1; }
        }
        else { fprintf(stderr, "g4tp synth: unknown option %s (see --help)\n", a); bad = 1; }
    }
    if (bad) return 2;
    if (!o.like || !o.out_dir) { fprintf(stderr, "g4tp synth: --like and --out are required (see --help)\n"); return 2; }
    if (asst && o.vision) { fprintf(stderr, "g4tp synth: --vision is not for --assistant\n"); return 2; }
    g4_err err = {0};
    if (asst) {
        ao.like = o.like;
        ao.out_dir = o.out_dir;
        ao.layers = o.layers;
        ao.seed = o.seed;
        if (g4_synth_assistant_write(&ao, &err)) { cli_error("synth", &err); return 1; }
        return 0;
    }
    if (ao.hidden || ao.intermediate) { fprintf(stderr, "g4tp synth: --hidden and --intermediate are for --assistant\n"); return 2; }
    if (g4_synth_write(&o, &err)) { cli_error("synth", &err); return 1; }
    return 0;
}
