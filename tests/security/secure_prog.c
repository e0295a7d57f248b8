/*
 * secure_prog.c — linked against libtensorleak.so (an absolute RUNPATH: a
 * setuid program ignores LD_PRELOAD paths with a slash and $ORIGIN), made
 * setuid to another user by security_test.py.  Prints its real and effective
 * uid, then asks for a snapshot: where the report lands shows whether the
 * TENSORLEAK_* variables were ignored.
 */
#include "tensorleak.h"

#include <stdio.h>
#include <unistd.h>

int main(void)
{
    printf("uid %d euid %d\n", (int)getuid(), (int)geteuid());
    fflush(stdout);
    return tensorleak_snapshot("secure") == 0 ? 0 : 4;
}
