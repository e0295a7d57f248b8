/*
 * slow_rename.c — preloaded before libtensorleak.so: the second rename of a
 * live state's temporary file (".NAME.tmp" in SLOW_RENAME_DIR's live
 * directory) takes 1.5 s, longer than any bounded wait at exit.  It creates
 * SLOW_RENAME_DIR/in-rename when it starts sleeping and
 * SLOW_RENAME_DIR/renamed once the real rename returned.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void touch(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0)
        close(fd);
}

__attribute__((visibility("default"))) int renameat(int olddirfd, const char *oldpath, int newdirfd,
                                                    const char *newpath);
int renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
    static atomic_int calls;
    int (*real)(int, const char *, int, const char *) =
        (int (*)(int, const char *, int, const char *))dlsym(RTLD_NEXT, "renameat");
    const char *dir = getenv("SLOW_RENAME_DIR");
    size_t len = strlen(oldpath);
    bool live_tmp = dir && oldpath[0] == '.' && len > 4 && !strcmp(oldpath + len - 4, ".tmp");
    if (!live_tmp || atomic_fetch_add(&calls, 1) != 1)
        return real(olddirfd, oldpath, newdirfd, newpath);
    touch(dir, "in-rename");
    struct timespec ts = {1, 500000000L};
    nanosleep(&ts, NULL);
    int rc = real(olddirfd, oldpath, newdirfd, newpath);
    touch(dir, "renamed");
    return rc;
}
