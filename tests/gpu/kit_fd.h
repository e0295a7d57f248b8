/*
 * kit_fd.h: a file descriptor passed to another process over a unix socket
 * (SCM_RIGHTS), as NCCL and vLLM pass a VMM allocation's exported descriptor.
 * The receiver's descriptor names the same open file (same st_dev/st_ino).
 * Shared by tests/gpu/vmm_share.c and tests/integration/progs/vmm_share.c;
 * any failure exits with status 4.
 */
#ifndef TL_GPU_KIT_FD_H
#define TL_GPU_KIT_FD_H

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

union kit_fd_control {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
};

static inline void kit_send_fd(int sock, int fd)
{
    char byte = 'h';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union kit_fd_control c;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(sock, &msg, 0) != 1)
        exit(4);
}

static inline int kit_recv_fd(int sock)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union kit_fd_control c;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    if (recvmsg(sock, &msg, 0) != 1)
        exit(4);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    if (!cm || cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
        exit(4);
    int fd;
    memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    return fd;
}

#endif
