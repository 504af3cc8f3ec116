/* One GSO run (or one datagram) onto a UDP socket: the send lane's system call, shared by _txlane's send_run (the
 * Python loop's bursts) and _rxlane's rx_wait (the bursts of one peer's sends in the native wait), so both put the
 * same bytes on the wire.
 *
 * ``iov`` holds 2 * n entries, each datagram's 48-byte header then its payload. With a ``key`` (the tag schedule,
 * _tagkey.h) each header's keyed tag is written first, in place. ``tos``: the IP TOS byte; ``seg`` > 0 adds
 * UDP_SEGMENT ``seg`` (every datagram but the last exactly ``seg`` bytes), 0 sends one datagram. Call without the
 * GIL. Returns sendmsg's result (-1 with errno set). */
#ifndef DLCP_SENDRUN_H
#define DLCP_SENDRUN_H

#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#define SENDRUN_HEADER_LEN 48
#define SENDRUN_MAX 64 /* datagrams per run (transmit.GSO_MAX_SEGS) */

static ssize_t dlcp_send_run(int fd, struct iovec *iov, size_t n, const struct sockaddr_in *sa, int tos, int seg,
                             const uint8_t *key)
{
    if (key != NULL)
        for (size_t k = 0; k < n; k++) {
            uint8_t *h = iov[2 * k].iov_base;
            dlcp_put_be64(h + SENDRUN_HEADER_LEN - 8,
                          dlcp_tag(key, h, iov[2 * k + 1].iov_base, iov[2 * k + 1].iov_len));
        }
    union {
        char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(uint16_t))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_name = (void *)sa;
    msg.msg_namelen = sizeof *sa;
    msg.msg_iov = iov;
    msg.msg_iovlen = 2 * n;
    msg.msg_control = ctl.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int)) + (seg ? CMSG_SPACE(sizeof(uint16_t)) : 0);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_TOS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &tos, sizeof tos);
    if (seg) {
        c = CMSG_NXTHDR(&msg, c);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t g = (uint16_t)seg;
        memcpy(CMSG_DATA(c), &g, sizeof g);
    }
    return sendmsg(fd, &msg, 0);
}

#endif
