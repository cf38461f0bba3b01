// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// Route lookup (route_source.h).
#include "device/route_source.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstring>

#include "cm/cm.h"
#include "owners.h"

namespace evd {

bool route_source(const struct sockaddr* dst, struct sockaddr_storage* out) {
    size_t len = cm_addrlen(dst);
    if (!len || (dst->sa_family != AF_INET && dst->sa_family != AF_INET6)) return false;
    fd_owner sock(socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    const int s = sock.fd;
    if (s < 0) return false;
    struct sockaddr_storage tmp;
    std::memcpy(&tmp, dst, len);
    // any port will do for a route lookup
    if (dst->sa_family == AF_INET)
        reinterpret_cast<struct sockaddr_in*>(&tmp)->sin_port = htons(9);
    else
        reinterpret_cast<struct sockaddr_in6*>(&tmp)->sin6_port = htons(9);
    bool ok = connect(s, reinterpret_cast<struct sockaddr*>(&tmp), len) == 0;
    socklen_t ol = sizeof(*out);
    ok = ok && getsockname(s, reinterpret_cast<struct sockaddr*>(out), &ol) == 0;
    if (ok) {
        if (out->ss_family == AF_INET)
            reinterpret_cast<struct sockaddr_in*>(out)->sin_port = 0;
        else
            reinterpret_cast<struct sockaddr_in6*>(out)->sin6_port = 0;
    }
    return ok;
}

}  // namespace evd
