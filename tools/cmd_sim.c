/*
 * cmd_sim.c: `tensorleak sim [--] CMD ARGS...`: run CMD on the simulated
 * CUDA stack, untracked.
 *
 * The environment is exactly `tensorleak run --sim`'s without
 * libtensorleak.so (exec_env.c): the simulated driver, runtime and NVML
 * come first, nothing else changes.  So a program's behaviour with and
 * without tensorleak can be compared on the same simulated GPU, and a
 * program's memory behaviour can be tried without a GPU.  CMD is exec'd in
 * place: its exit status reaches the caller unchanged.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>

static const char usage[] = "usage: tensorleak sim [--] CMD ARGS...";

int cmd_sim(int argc, char **argv)
{
    static const struct option options[] = {
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int opt;
    opterr = 0;
    optind = 1;
    /* '+': stop at CMD, so that CMD's own options are left alone. */
    while ((opt = getopt_long(argc, argv, "+:h", options, NULL)) != -1) {
        if (opt != 'h')
            return cli_option_error("sim", opt, argv);
        puts(usage);
        return CLI_EXIT_OK;
    }
    if (optind >= argc) {
        cli_error("sim: expected a command to run\n%s", usage);
        return CLI_EXIT_USAGE;
    }
    if (!cli_sim_environment("sim"))
        return CLI_EXIT_USAGE;
    execvp(argv[optind], &argv[optind]);
    int err = errno;
    cli_error("sim: %s: %s", argv[optind], strerror(err));
    return err == ENOENT ? 127 : 126;
}
