// SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
// RDMA netlink: is a device still registered (device_netlink.h)? One NLDEV GET
// dump, parsed in place: the reply is untrusted input, so every attribute
// length is checked against the message before it is read.
#include "device_netlink.h"

#include <linux/netlink.h>
#include <rdma/rdma_netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "owners.h"

namespace evd {

int rdma_nl_device_registered(uint32_t index) {
    fd_owner sock(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_RDMA));
    const int fd = sock.fd;
    if (fd < 0) return -1;
    struct nlmsghdr req {};
    req.nlmsg_len = sizeof req;
    req.nlmsg_type = RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET);
    req.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.nlmsg_seq = 1;
    struct sockaddr_nl sa {};
    sa.nl_family = AF_NETLINK;
    int result = -1;
    if (sendto(fd, &req, sizeof req, 0, reinterpret_cast<struct sockaddr*>(&sa), sizeof sa) ==
        static_cast<ssize_t>(sizeof req)) {
        alignas(struct nlmsghdr) char buf[16384];
        bool found = false, done = false, failed = false;
        while (!done && !failed) {
            ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0) {
                failed = true;
                break;
            }
            int len = static_cast<int>(n);
            for (auto* h = reinterpret_cast<struct nlmsghdr*>(buf); NLMSG_OK(h, len);
                 h = NLMSG_NEXT(h, len)) {
                if (h->nlmsg_type == NLMSG_DONE) {
                    done = true;
                    break;
                }
                if (h->nlmsg_type == NLMSG_ERROR) {
                    failed = true;
                    break;
                }
                // NLDEV messages carry attributes right after the header.
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
                        found = found || v == index;
                    }
                    p += NLA_ALIGN(at.nla_len);
                }
            }
        }
        if (done) result = found ? 1 : 0;
    }
    return result;
}

}  // namespace evd
