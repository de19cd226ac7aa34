/* STAND-IN for the pyxis SPANK plugin (tests only). A real SPANK plugin built against the installed Slurm: it
 * registers one clearly named option, so `srun --help` shows whether Slurm loaded it through plugstack.conf.d.
 * It runs no containers. */
#include <stddef.h>

#include <slurm/spank.h>

SPANK_PLUGIN(pyxis, 1);

static int standin_option(int val, const char *optarg, int remote) {
    (void)val;
    (void)optarg;
    (void)remote;
    return 0;
}

struct spank_option spank_options[] = {
    {"trainstack-standin-pyxis", NULL, "stand-in for pyxis (trainstack tests; runs no containers)", 0, 0,
     standin_option},
    SPANK_OPTIONS_TABLE_END};

int slurm_spank_init(spank_t sp, int ac, char **av) {
    (void)sp;
    (void)ac;
    (void)av;
    return 0;
}
