/*
 * cmd_check.c: `tensorleak check FILE [--max-leaked-bytes N]
 * [--max-growth-bytes N] [--suppressions F]`, the CI gate over a saved report.
 *
 * Leaked bytes: the sum over "leaks" not marked suppressed by the program and
 * not matched by a `leak:` rule of --suppressions (a report without a "leaks"
 * array falls back to summary.leaked_bytes), less the bytes of shared VMM
 * allocations a merge found counted in another input ("counted_elsewhere"). Growth bytes: bytes_per_mark *
 * marks summed over the "growth" rows of each scope, same exclusions with
 * `growth:` rules, and the largest of those sums taken: call sites, framework
 * pools, owners' reserves and Python lines are views of the same
 * memory (a KV cache kept in PyTorch's cache grows its pool's allocated
 * bytes, its owner's reserve and the caching allocator's call site at once),
 * so adding them would count one leak two to four times.
 * PASS when both are within their limits (default 0). Exit 0 pass, 1 fail,
 * 2 unusable input or arguments.
 */
#include "cli.h"
#include "model.h"
#include "report_fields.h"
#include "sizes.h"

#include <getopt.h>
#include <inttypes.h>
#include <string.h>

static const char usage[] =
    "usage: tensorleak check FILE [--max-leaked-bytes N] [--max-growth-bytes N] "
    "[--suppressions FILE]";

static uint64_t saturating_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t saturating_mul(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static bool parse_limit(const char *option, const char *text, uint64_t *out)
{
    if (size_parse(text, out))
        return true;
    cli_error("check: %s: invalid size '%s' (expected bytes, optionally with K, M or G)",
              option, text);
    return false;
}

int cmd_check(int argc, char **argv)
{
    static const struct option options[] = {
        { "max-leaked-bytes", required_argument, NULL, 'l' },
        { "max-growth-bytes", required_argument, NULL, 'g' },
        { "suppressions", required_argument, NULL, 's' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    uint64_t max_leaked = 0, max_growth = 0;
    const char *supp_path = NULL;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (opt) {
        case 'l':
            if (!parse_limit("--max-leaked-bytes", optarg, &max_leaked))
                return CLI_EXIT_USAGE;
            break;
        case 'g':
            if (!parse_limit("--max-growth-bytes", optarg, &max_growth))
                return CLI_EXIT_USAGE;
            break;
        case 's':
            supp_path = optarg;
            break;
        case 'h':
            puts(usage);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("check", opt, argv);
        }
    }
    if (argc - optind != 1) {
        cli_error("check: expected one report FILE\n%s", usage);
        return CLI_EXIT_USAGE;
    }

    struct tl_suppressions supp = { 0 };
    if (supp_path && !suppressions_load_file(supp_path, &supp))
        return CLI_EXIT_USAGE;
    struct tl_report report;
    if (!report_load(argv[optind], &report)) {
        tl_suppressions_free(&supp);
        return CLI_EXIT_USAGE;
    }

    uint64_t leaked = 0, growth = 0;
    if (report.seen.present & TL_BIT(REPORT, leaks)) {
        for (size_t i = 0; i < report.leak_count; i++) {
            const struct tl_leak *l = &report.leaks[i];
            if (l->suppressed || report_kind_is_address_space(l->kind) || /* not memory */
                suppressions_match_stack(&supp, TL_SUPP_LEAK, &l->stack) >= 0)
                continue;
            /* A shared allocation another rank's report counts (merge). */
            uint64_t elsewhere = l->counted_elsewhere < l->bytes ? l->counted_elsewhere : l->bytes;
            leaked = saturating_add(leaked, l->bytes - elsewhere);
        }
    } else {
        leaked = report.summary.leaked_bytes;
    }
    static const char *const scopes[] = {"call_site", "pool", "owner", "python_site"};
    uint64_t by_scope[sizeof scopes / sizeof scopes[0] + 1] = {0}; /* the last: a scope this version does not know */
    for (size_t i = 0; i < report.growth_count; i++) {
        const struct tl_growth *g = &report.growth[i];
        if (g->suppressed || report_kind_is_address_space(g->kind) || /* not memory */
            suppressions_match_stack(&supp, TL_SUPP_GROWTH, &g->stack) >= 0)
            continue;
        size_t k = 0;
        while (k < sizeof scopes / sizeof scopes[0] && strcmp(g->scope ? g->scope : "call_site", scopes[k]) != 0)
            k++;
        by_scope[k] = saturating_add(by_scope[k], saturating_mul(g->bytes_per_mark, g->marks));
    }
    for (size_t k = 0; k < sizeof by_scope / sizeof by_scope[0]; k++)
        if (by_scope[k] > growth)
            growth = by_scope[k];
    report_free(&report);
    tl_suppressions_free(&supp);

    bool pass = leaked <= max_leaked && growth <= max_growth;
    printf("tensorleak check: %s: %" PRIu64 " byte(s) leaked (limit %" PRIu64 "), %" PRIu64
           " byte(s) growth (limit %" PRIu64 ")\n",
           pass ? "PASS" : "FAIL", leaked, max_leaked, growth, max_growth);
    return pass ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
