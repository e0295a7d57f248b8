/* suppress.c — placeholder until the shared suppression parser lands. */
#include "report.h"

void tl_suppressions_load(void) {}

const char *tl_suppressed(struct tl_report_model *m, const char *kind, struct tl_callsite *cs)
{
    (void)m; (void)kind; (void)cs;
    return NULL;
}
