/* kernel_rx on a descriptor: the MSG_PEEK recvmsg for a receive stamp, the TCP_INFO
 * read. Follows tracing/timing/kernel_rx.py. */

#include "timing.h"

/* == kernel_rx, on the descriptor ======================================================= */

/* recvmsg(fd, buf[:len], flags | MSG_DONTWAIT) with room for a receive stamp: the bytes
 * read (-1 with errno set), and in *have / *arrival the stamp the kernel gave them
 * (kernel_rx.stamp_of). Data without a stamp switches the option on for the next time. */
ssize_t recv_stamped(int fd, void *buf, size_t len, int flags, int *have,
                     int64_t *arrival) {
    char control[CMSG_SPACE(sizeof(struct timespec))];
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr msg;
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    *have = 0;
    ssize_t n = recvmsg(fd, &msg, flags | MSG_DONTWAIT);
    if (n < 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == RX_SO_TIMESTAMPNS &&
            c->cmsg_len >= CMSG_LEN(16)) {
            long parts[2];
            memcpy(parts, CMSG_DATA(c), sizeof(parts));
            *arrival = (int64_t)parts[0] * 1000000000LL + parts[1];
            *have = 1;
            return n;
        }
    }
    if (n > 0) {
        int on = 1;
        (void)setsockopt(fd, SOL_SOCKET, RX_SO_TIMESTAMPNS, &on, sizeof(on));
    }
    return n;
}

/* Peeks taken (tests: a plain socket's read takes its stamp without one). */
unsigned long long peeks = 0;

/* peek_arrival_ns: 1 with *arrival set, 0 none (and the option switched on when data
 * was queued without a stamp). Never fails: a failed peek is "none". */
int peek_arrival(int fd, int64_t *arrival) {
    char byte;
    int have;
    peeks++;
    if (recv_stamped(fd, &byte, 1, MSG_PEEK, &have, arrival) < 0) return 0;
    return have;
}

/* last_ack_age_ns: 1 with *age set, 0 unknown. */
int last_ack_age(int fd, int64_t *age) {
    unsigned char info[TCP_INFO_LEN];
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, info, &len) < 0) return 0;
    if (len < TCP_INFO_LAST_ACK_RECV_OFFSET + 4) return 0;
    uint32_t ms;
    memcpy(&ms, info + TCP_INFO_LAST_ACK_RECV_OFFSET, sizeof(ms));
    *age = (int64_t)ms * 1000000LL;
    return 1;
}

int fd_of_raw(PyObject *sock) {
    PyObject *raw = PyObject_GetAttr(sock, s_sock);
    if (raw == NULL) return -1;
    int fd = PyObject_AsFileDescriptor(raw);
    Py_DECREF(raw);
    return fd;
}

PyObject *py_peek_arrival_ns(PyObject *mod, PyObject *raw) {
    int fd = PyObject_AsFileDescriptor(raw);
    if (fd < 0) return NULL;
    int64_t arrival;
    if (!peek_arrival(fd, &arrival)) Py_RETURN_NONE;
    return PyLong_FromLongLong(arrival);
}
