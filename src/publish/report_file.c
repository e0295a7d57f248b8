/*
 * report_file.c — where a report goes and how it gets there.
 *
 * Files are written to a temporary name (O_EXCL|O_NOFOLLOW, mode 0600) and
 * renamed into place without replacing anything (RENAME_NOREPLACE): a
 * reader never sees half a report, a planted symlink is never followed, and
 * no report replaces another file — the exit report takes the plain name of
 * TENSORLEAK_OUTPUT, every other report a numbered one, and a taken name
 * the next number.  TENSORLEAK_OUTPUT=/dev/null (the null device under any
 * name) asks for no reports: nothing is written, neither there nor beside
 * it, nor on stderr.  The names themselves come from report_name.c (base/).
 */
#include "report_gather.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes the report through `write` into a temporary file next to `path`
 * (O_EXCL|O_NOFOLLOW, mode 0600) and stores its name in `tmp`.  Returns 0,
 * or an errno value (the temp file is gone then). */
static int write_temp(const char *path, tl_report_writer *write_text, void *arg, char *tmp, size_t tmplen)
{
    if (snprintf(tmp, tmplen, "%s.tmp.%d", path, (int)getpid()) >= (int)tmplen)
        return ENAMETOOLONG;
    unlink(tmp); /* a stale temp file of ours from an earlier crash */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int e = write_text(fd, arg);
    if (close(fd) != 0 && !e)
        e = errno;
    if (e)
        unlink(tmp);
    return e;
}

int tl_report_write_all(int fd, const char *text, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, text, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        text += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Gives the finished temp file the name `path` unless something (another
 * report, a file of the user's, a symlink) already has it: EEXIST then, and
 * the temp file stays for the next name.  Returns 0, EEXIST or an errno. */
static int publish_no_replace(const char *tmp, const char *path)
{
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
        return 0;
    int e = errno;
    if (e != EINVAL && e != ENOSYS && e != ENOTSUP && e != EOPNOTSUPP)
        return e;
    /* The file system has no RENAME_NOREPLACE: a hard link fails the same
     * way on an existing name. */
    if (link(tmp, path) == 0) {
        unlink(tmp);
        return 0;
    }
    e = errno;
    if (e != EPERM && e != ENOTSUP && e != EOPNOTSUPP && e != ENOSYS)
        return e;
    /* Nor hard links (vfat, some FUSE): check, then rename.  A name taken
     * between the two steps is the only way left to lose a file. */
    struct stat st;
    if (lstat(path, &st) == 0)
        return EEXIST;
    return rename(tmp, path) == 0 ? 0 : errno;
}

/* The number of the last numbered file written: a name taken by someone
 * else pushes every later report past it, so numbers only grow. */
static unsigned last_numbered;

/* Writes the report (through `write_text`) to its own file: the exit
 * report under the plain pattern, every other report (or the exit report, when its plain name is
 * taken) under a numbered name; never over an existing file.  `exact`, when
 * given, is the caller's own path (tensorleak_snapshot_to), replaced if it
 * exists.  Fills `path` with the name written.  The null device, as
 * TENSORLEAK_OUTPUT or `exact`, takes the report and nothing is written (a
 * rename would replace the device node, as root).  Returns 0, or an errno
 * value (ENAMETOOLONG when the pattern expands too long). */
int tl_report_write_file(enum tl_reason reason, unsigned seq, const char *exact, tl_report_writer *write_text,
                         void *arg, char *path, size_t pathlen)
{
    char tmp[PATH_MAX];
    int err;
    if (exact) {
        if (snprintf(path, pathlen, "%s", exact) >= (int)pathlen)
            return ENAMETOOLONG;
        if (tl_is_null_device(path))
            return 0;
        err = write_temp(path, write_text, arg, tmp, sizeof tmp);
        if (err)
            return err;
        /* rename replaces a symlink named `path` itself, never its target. */
        if (rename(tmp, path) != 0) {
            err = errno;
            unlink(tmp);
        }
        return err;
    }
    if (tl_opt.output_null)
        return snprintf(path, pathlen, "/dev/null") >= (int)pathlen ? ENAMETOOLONG : 0;
    /* The final report (exit, or a detach) takes the path as given. */
    bool numbered = reason != TL_REASON_EXIT && reason != TL_REASON_DETACH;
    unsigned n = seq;
    if (numbered && n <= last_numbered)
        n = last_numbered + 1;
    if (tl_report_path(tl_opt.output, n, numbered, path, pathlen) != 0)
        return ENAMETOOLONG;
    err = write_temp(path, write_text, arg, tmp, sizeof tmp);
    if (err)
        return err;
    for (int tries = 0; tries < 1000; tries++) {
        err = publish_no_replace(tmp, path);
        if (numbered && err != ENAMETOOLONG)
            last_numbered = n;
        if (err != EEXIST)
            break;
        if (!numbered) {
            numbered = true;
            n = seq > last_numbered ? seq : last_numbered + 1;
        } else {
            n++;
        }
        if (tl_report_path(tl_opt.output, n, true, path, pathlen) != 0) {
            err = ENAMETOOLONG;
            break;
        }
    }
    if (err)
        unlink(tmp);
    return err;
}

bool tl_report_sigxfsz_hold(struct sigaction *saved)
{
    /* A full disk or RLIMIT_FSIZE must give an error, not kill the host
     * program with SIGXFSZ — but only if the program left it at default.
     * The signal is process-directed (a thread mask would not keep it from
     * another thread), so it is ignored for the length of the write. */
    if (sigaction(SIGXFSZ, NULL, saved) != 0 || saved->sa_handler != SIG_DFL || (saved->sa_flags & SA_SIGINFO))
        return false;
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    return sigaction(SIGXFSZ, &ign, NULL) == 0;
}

void tl_report_sigxfsz_release(bool held, const struct sigaction *saved)
{
    struct sigaction now;
    /* Unless the program set a disposition of its own meanwhile. */
    if (held && sigaction(SIGXFSZ, NULL, &now) == 0 && now.sa_handler == SIG_IGN && !(now.sa_flags & SA_SIGINFO))
        sigaction(SIGXFSZ, saved, NULL);
}
