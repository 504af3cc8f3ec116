/* Host-side DSCP marking for programs we cannot change (Gloo's and torch's TCP sockets): loaded with LD_PRELOAD
 * into the testbed's workers, it sets IP_TOS (and IPV6_TCLASS) on every TCP socket the process creates to
 * DLCP_JOB_DSCP << 2. The kernel keeps the ECN bits of a TCP socket's TOS its own, so ECN still works. Accepted
 * connections inherit the listening socket's TOS. (This kernel has no tc actions or netfilter to mark on the
 * wire, so the marking happens where the sockets are made.) Built by testbed.run with the system C compiler. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*socket_fn)(int, int, int);

int socket(int domain, int type, int protocol) {
    static socket_fn real = 0;
    if (!real)
        real = (socket_fn)dlsym(RTLD_NEXT, "socket");
    int fd = real(domain, type, protocol);
    const char *v = getenv("DLCP_JOB_DSCP");
    if (fd >= 0 && v && (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM) {
        int tos = (atoi(v) & 0x3f) << 2;
        setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof tos);
        if (domain == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof tos);
    }
    return fd;
}
