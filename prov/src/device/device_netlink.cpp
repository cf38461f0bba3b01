// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// RDMA netlink: is a device still registered (device_netlink.h)? One NLDEV GET
// dump, parsed in place: the reply is untrusted input, so every attribute
// length is checked against the message before it is read.
#include "device/device_netlink.h"

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "owners.h"

namespace evd {

namespace {

// Whether one NLDEV message's attributes (right after its header) name
// device index `index`. The kernel's data is checked, not trusted: an
// attribute that overruns its message ends the scan.
bool names_index(const struct nlmsghdr* h, uint32_t index) {
    const char* p = static_cast<const char*>(NLMSG_DATA(h));
    const char* end = reinterpret_cast<const char*>(h) + h->nlmsg_len;
    while (p + sizeof(struct nlattr) <= end) {
        struct nlattr at;
        std::memcpy(&at, p, sizeof at);
        if (at.nla_len < sizeof at || p + at.nla_len > end) break;
        if ((at.nla_type & NLA_TYPE_MASK) == RDMA_NLDEV_ATTR_DEV_INDEX &&
            at.nla_len >= sizeof at + sizeof(uint32_t)) {
            uint32_t v;
            std::memcpy(&v, p + sizeof at, sizeof v);
            if (v == index) return true;
        }
        p += NLA_ALIGN(at.nla_len);
    }
    return false;
}

enum class scan { more, done, failed };

// One datagram of the dump reply: *found is set when a message names index.
scan scan_reply(const char* buf, int len, uint32_t index, bool* found) {
    for (auto* h = reinterpret_cast<const struct nlmsghdr*>(buf); NLMSG_OK(h, len);
         h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_DONE) return scan::done;
        if (h->nlmsg_type == NLMSG_ERROR) return scan::failed;
        *found = *found || names_index(h, index);
    }
    return scan::more;
}

}  // namespace

int rdma_nl_device_registered(uint32_t index) {
    fd_owner sock(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA));
    if (sock.fd < 0) return -1;
    struct nlmsghdr req {};
    req.nlmsg_len = sizeof req;
    req.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
    req.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.nlmsg_seq = 1;
    struct sockaddr_nl sa {};
    sa.nl_family = AF_NETLINK;
    if (sendto(sock.fd, &req, sizeof req, 0, reinterpret_cast<struct sockaddr*>(&sa),
               sizeof sa) != static_cast<ssize_t>(sizeof req))
        return -1;
    alignas(struct nlmsghdr) char buf[16384];
    bool found = false;
    for (;;) {
        ssize_t n = recv(sock.fd, buf, sizeof buf, 0);
        if (n <= 0) return -1;
        switch (scan_reply(buf, static_cast<int>(n), index, &found)) {
            case scan::done: return found ? 1 : 0;
            case scan::failed: return -1;
            case scan::more: break;
        }
    }
}

}  // namespace evd
