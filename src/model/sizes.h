/*
 * sizes.h: byte counts and times for people. Parsing of "64M"-style limits,
 * the one-decimal B/KiB/MiB/GiB rendering and the UTC time every text
 * output uses (the CLI's and the preload library's alike).
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

/* size_human into a buffer of any size (the preload library's messages). */
void tl_format_size(uint64_t bytes, char *buf, size_t len);

/* CLOCK_REALTIME seconds as ISO-8601 UTC with milliseconds:
 * "2026-11-30T21:02:03.123Z". */
void tl_format_realtime(double t, char *buf, size_t len);

#endif
