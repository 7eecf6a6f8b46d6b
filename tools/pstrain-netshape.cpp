// pstrain-netshape: a link that delays and loses frames, in user space, for
// kernels without the netem qdisc. pstrain-cluster(1)'s `shape` runs one per
// virtual node of a --netns cluster, between the node's veth (its side of
// the cable) and the bridge's: what the node sends is held for the delay (±
// the jitter) and lost with the given probability; what it receives passes
// at once. So each one-way path between two nodes crosses one shaper, as a
// netem qdisc on every node's egress would make it.
//
//   pstrain-netshape --node IF --bridge IF [--delay US] [--jitter US]
//                    [--loss P] [--seed N] [--stats FILE]
//
// Frames are read and written whole with AF_PACKET sockets and
// PACKET_VNET_HDR, so the kernel's checksum and segmentation offload state
// crosses with them (pstrain-cluster sets the node's gso_max_segs to 1, so a
// frame is one packet and the loss is per packet). Order is kept: a frame is
// never sent before the one that came before it (jitter then delays the
// next frames too, as on a real link with one queue). On SIGTERM or SIGINT
// it writes its counters to --stats (forwarded, lost, each way) and exits 0.
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cerrno>
#include <csignal>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace {

// struct virtio_net_hdr, which PACKET_VNET_HDR puts before every frame
// (<linux/virtio_net.h> is not valid C++: a member is named `class`).
constexpr std::size_t vnet_header_size = 10;

volatile std::sig_atomic_t stopping = 0;
void on_signal(int) { stopping = 1; }

[[noreturn]] void die(const std::string& line)
{
    std::fprintf(stderr, "pstrain-netshape: %s\n", line.c_str());
    std::exit(2);
}

// CLOCK_REALTIME: the clock of the kernel's receive timestamps (SO_TIMESTAMPNS).
std::int64_t now_ns()
{
    timespec t{};
    clock_gettime(CLOCK_REALTIME, &t);
    return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// An AF_PACKET socket on one interface: every frame it receives, with the
// virtio-net header in front; none of those this process sends.
int open_port(const std::string& name)
{
    const unsigned index = if_nametoindex(name.c_str());
    if (index == 0) die("no interface '" + name + "': " + std::strerror(errno));
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    if (fd < 0) die(std::string("socket(AF_PACKET): ") + std::strerror(errno) + ": run as root");
    int on = 1;
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) != 0)
        die(std::string("PACKET_VNET_HDR: ") + std::strerror(errno));
    if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on) != 0)
        die(std::string("PACKET_IGNORE_OUTGOING (Linux 4.20): ") + std::strerror(errno));
    if (setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0)
        die(std::string("SO_TIMESTAMPNS: ") + std::strerror(errno));
    int buffer = 16 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buffer, sizeof buffer);
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(ETH_P_ALL);
    at.sll_ifindex = static_cast<int>(index);
    if (bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0)
        die("bind to " + name + ": " + std::strerror(errno));
    packet_mreq promisc{};
    promisc.mr_ifindex = static_cast<int>(index);
    promisc.mr_type = PACKET_MR_PROMISC;
    if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &promisc, sizeof promisc) != 0)
        die("promiscuous mode on " + name + ": " + std::strerror(errno));
    return fd;
}

struct frame {
    std::int64_t due_ns;
    std::vector<unsigned char> bytes;  // virtio-net header + the Ethernet frame
};

// One frame into `buffer`: its length (0: none waiting) and when the kernel
// received it.
std::size_t receive(int fd, std::vector<unsigned char>& buffer, std::int64_t& arrived_ns)
{
    iovec io{buffer.data(), buffer.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    msghdr m{};
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd, &m, 0);
    if (n <= 0) return 0;
    arrived_ns = now_ns();
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            timespec t{};
            std::memcpy(&t, CMSG_DATA(c), sizeof t);
            arrived_ns = static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
        }
    return static_cast<std::size_t>(n);
}

// An exponentially weighted mean of nanoseconds.
struct running_mean {
    double value = 0;
    void add(double x) { value += 0.05 * (x - value); }
};

struct counters {
    std::uint64_t forwarded = 0, lost = 0, send_errors = 0;
};

double number(const char* flag, const char* text, double low, double high)
{
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= low && v <= high))
        die(std::string(flag) + " '" + text + "': give a number from " + std::to_string(low) + " to " +
            std::to_string(high));
    return v;
}

}  // namespace

int main(int argc, char** argv)
{
    std::string node, bridge, stats;
    double delay_us = 0, jitter_us = 0, loss = 0;
    unsigned long seed = 1;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) die("'" + flag + "' needs a value (see the usage at the top of pstrain-netshape.cpp)");
        const char* value = argv[++i];
        if (flag == "--node") node = value;
        else if (flag == "--bridge") bridge = value;
        else if (flag == "--delay") delay_us = number("--delay", value, 0, 10e6);
        else if (flag == "--jitter") jitter_us = number("--jitter", value, 0, 10e6);
        else if (flag == "--loss") loss = number("--loss", value, 0, 1);
        else if (flag == "--seed") seed = static_cast<unsigned long>(number("--seed", value, 0, 4e9));
        else if (flag == "--stats") stats = value;
        else die("unknown option '" + flag + "': use --node --bridge --delay --jitter --loss --seed --stats");
    }
    if (node.empty() || bridge.empty()) die("give --node IF (the node's side) and --bridge IF (the bridge's side)");
    if (jitter_us > delay_us) die("--jitter must not exceed --delay (a frame cannot leave before it came)");

    // Wake-ups as exact as the kernel's timers allow (the default slack is 50 us).
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);

    const int out_fd = open_port(node);   // frames the node sends
    const int in_fd = open_port(bridge);  // frames for the node
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    std::deque<frame> held;
    std::int64_t last_due = 0;
    counters egress, ingress;
    std::vector<unsigned char> buffer(vnet_header_size + 65536 + 64);
    // The delay a path gets is the added delay, so the shaper takes its own
    // costs out of it: how late its timer wakes it (it wakes that much
    // early), and what the frame's other hop, through the receiving node's
    // shaper, costs (it holds the frame that much less). Below those (some
    // 20-40 us on a busy machine) a delay cannot be made exact.
    running_mean late_ns, hop_ns;
    const std::int64_t delay_ns = static_cast<std::int64_t>(delay_us * 1000);

    while (!stopping) {
        std::int64_t now = now_ns();
        // Woken that much before the due time, the frame leaves about on it.
        const auto early = std::min(static_cast<std::int64_t>(late_ns.value), delay_ns / 2);
        // A lone frame (a round trip's, not a stream's) is sent on its due
        // time: the last of the early wake-up is spent spinning.
        if (held.size() <= 4 && !held.empty() && held.front().due_ns - early <= now)
            while (now < held.front().due_ns) now = now_ns();
        while (!held.empty() && held.front().due_ns - early <= now) {
            const auto& f = held.front();
            if (send(in_fd, f.bytes.data(), f.bytes.size(), 0) < 0) ++egress.send_errors;
            else ++egress.forwarded;
            held.pop_front();
        }
        pollfd fds[2] = {{out_fd, POLLIN, 0}, {in_fd, POLLIN, 0}};
        timespec wait{1, 0};
        std::int64_t wake = 0;
        if (!held.empty()) {
            wake = held.front().due_ns - early;
            const std::int64_t left = wake - now_ns();
            wait = left <= 0 ? timespec{0, 0} : timespec{left / 1000000000, left % 1000000000};
        }
        const int ready = ppoll(fds, 2, &wait, nullptr);
        if (ready < 0) {
            if (errno == EINTR) continue;
            die(std::string("ppoll: ") + std::strerror(errno));
        }
        if (ready == 0 && wake != 0) {
            // How late the timer woke us (a busy machine: tens of us), at most 200 us a sample.
            const auto late = static_cast<double>(now_ns() - wake);
            late_ns.add(std::clamp(late, 0.0, 200e3));
        }
        std::int64_t arrived = 0;
        if (fds[1].revents & POLLIN) {
            // Towards the node: at once.
            while (const std::size_t n = receive(in_fd, buffer, arrived)) {
                if (send(out_fd, buffer.data(), n, 0) < 0) {
                    ++ingress.send_errors;
                    continue;
                }
                ++ingress.forwarded;
                hop_ns.add(static_cast<double>(now_ns() - arrived));
            }
        }
        if (fds[0].revents & POLLIN) {
            // From the node: lost, or held for the delay from when it came.
            while (const std::size_t n = receive(out_fd, buffer, arrived)) {
                if (loss > 0 && unit(random) < loss) {
                    ++egress.lost;
                    continue;
                }
                const double jitter = jitter_us > 0 ? (2 * unit(random) - 1) * jitter_us * 1000 : 0.0;
                std::int64_t hold = delay_ns + static_cast<std::int64_t>(jitter);
                if (delay_ns > 0) hold -= static_cast<std::int64_t>(hop_ns.value);
                std::int64_t due = arrived + (hold > 0 ? hold : 0);
                if (due < last_due) due = last_due;  // one queue: never ahead of the frame before
                last_due = due;
                held.push_back(
                    {due, std::vector<unsigned char>(buffer.begin(), buffer.begin() + static_cast<long>(n))});
            }
        }
    }
    if (!stats.empty()) {
        if (FILE* f = std::fopen(stats.c_str(), "w")) {
            std::fprintf(
                f,
                "{\"egress_forwarded\": %llu, \"egress_lost\": %llu, \"egress_send_errors\": %llu, "
                "\"ingress_forwarded\": %llu, \"ingress_send_errors\": %llu, \"held\": %zu, "
                "\"timer_late_us\": %.1f, \"hop_us\": %.1f}\n",
                static_cast<unsigned long long>(egress.forwarded), static_cast<unsigned long long>(egress.lost),
                static_cast<unsigned long long>(egress.send_errors), static_cast<unsigned long long>(ingress.forwarded),
                static_cast<unsigned long long>(ingress.send_errors), held.size(), late_ns.value / 1000,
                hop_ns.value / 1000);
            std::fclose(f);
        }
    }
    return 0;
}
