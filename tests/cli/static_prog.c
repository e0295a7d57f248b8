/*
 * static_prog.c — linked statically (static-pie): the dynamic loader never
 * runs in it, so LD_PRELOAD is never read.  Prints a line and exits 3.
 */
#include <stdio.h>

int main(void)
{
    puts("static");
    return 3;
}
