/*
 * sizes.h: byte counts for people. Parsing of "64M"-style limits and the
 * one-decimal B/KiB/MiB/GiB rendering used by every text output.
 */
#ifndef TENSORLEAK_SIZES_H
#define TENSORLEAK_SIZES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Longest string size_human*() writes, NUL included. */
#define SIZE_HUMAN_MAX 32

/*
 * Parses a non-negative decimal byte count with an optional binary suffix
 * K, M, G or T (case-insensitive, optionally followed by "iB" or "B").
 * Returns false on garbage, a sign, or overflow.
 */
bool size_parse(const char *text, uint64_t *out);

/* "512 B", "12.0 MiB", "3.5 GiB" (bytes below 1 KiB without decimal). */
const char *size_human(uint64_t bytes, char buf[SIZE_HUMAN_MAX]);

/* Same with an explicit sign: "+8.0 MiB", "-512 B", "+0 B". */
const char *size_human_signed(int64_t bytes, char buf[SIZE_HUMAN_MAX]);

#endif
