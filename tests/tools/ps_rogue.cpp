// ps_rogue HOST:PORT [FRAMES]: a process that does not belong to the job
// connecting to a PS of a static cluster spec, as a stray or hostile one
// would.  Three connections:
//   1. answers the PS's challenge with a proof made with a wrong key, and
//      prints the PS's refusal;
//   2. sends FRAMES random frames (random channel, sender, token, length
//      up to 1 MB) without any handshake;
//   3. sends random bytes where the handshake's answer goes.
// Exit 0 when it did all three (whatever the PS said), 1 when it could not
// reach the PS.  The integration tests check that the job is unaffected.
#include "library/transport/handshake.hpp"
#include "library/transport/ucx.hpp"
#include "library/transport/ucx_transport.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

using namespace pstrain::ucx;
using clock_type = std::chrono::steady_clock;

int main(int argc, char** argv)
{
    if (argc < 2 || std::strchr(argv[1], ':') == nullptr) {
        fmt::print(stderr, "usage: ps_rogue HOST:PORT [FRAMES]\n");
        return 2;
    }
    std::string where = argv[1];
    auto colon = where.rfind(':');
    std::string host = where.substr(0, colon);
    int port = std::atoi(where.c_str() + colon + 1);
    int frames = argc > 2 ? std::atoi(argv[2]) : 200;
    std::mt19937_64 rng(12345);

    try {
        context ctx;
        engine w(ctx, progress_mode::spin);
        auto address = w.address();

        // 1. A wrong key.
        {
            auto ep = endpoint::to_sockaddr(w, host, port, "the PS");
            challenge_frame challenge;
            auto got = w.recv(make_tag(bootstrap_channel, 0), tag_channel_mask, &challenge, sizeof challenge);
            if (!w.wait_until([&] { return got.done() || ep->failed(); },
                              clock_type::now() + std::chrono::seconds(10)) ||
                !got.done() || got.status() != UCS_OK) {
                fmt::print(stderr, "ps_rogue: no challenge from {}\n", where);
                return 1;
            }
            fmt::print("ps_rogue: challenged by ps {}\n", challenge.ps_index);
            auto wrong = random_key();
            response_frame answer;
            answer.worker_index = 0;
            answer.ps_nonce = challenge.ps_nonce;
            answer.worker_nonce = random_nonce();
            answer.proof = worker_proof(wrong, answer.ps_nonce, answer.worker_nonce, challenge.ps_index, 0);
            answer.address_bytes = address.size();
            confirm_frame reply;
            auto r = w.recv(make_tag(bootstrap_channel, challenge.ps_index), tag_full_mask, &reply, sizeof reply);
            const ucp_dt_iov_t iov[2] = {{&answer, sizeof answer}, {address.data(), address.size()}};
            auto sent = w.send(ep->get(), make_tag(bootstrap_channel, 0), std::span(iov, 2));
            w.wait_until([&] { return r.done(); }, clock_type::now() + std::chrono::seconds(10));
            if (r.done() && r.status() == UCS_OK && reply.magic == confirm_frame::refused_value) {
                reply.why[sizeof reply.why - 1] = 0;
                fmt::print("ps_rogue: refused: {}\n", reply.why);
            } else if (r.done() && r.status() == UCS_OK && reply.magic == confirm_frame::magic_value) {
                fmt::print("ps_rogue: ACCEPTED with a wrong key\n");
            } else {
                fmt::print("ps_rogue: no reply to the wrong proof\n");
                if (!r.done()) r.cancel(w.get());
            }
            w.wait_until([&] { return r.done() && sent.done(); }, clock_type::now() + std::chrono::seconds(1));
            ep->close(std::chrono::milliseconds(200), true);
        }

        // 2. Frames without a handshake, with tags a worker's would have
        //    but for the token.
        {
            auto ep = endpoint::to_sockaddr(w, host, port, "the PS");
            std::vector<std::uint8_t> big(1 << 20);
            for (auto& b : big) b = static_cast<std::uint8_t>(rng());
            std::vector<request> sends;
            std::vector<std::uint64_t> lengths;
            int sent = 0;
            for (int i = 0; i < frames; ++i) {
                auto channel = static_cast<std::uint8_t>(rng() % 2);
                auto sender = static_cast<std::uint32_t>(rng() % 4);
                auto token = static_cast<std::uint32_t>(rng());
                std::size_t length = i % 10 == 9 ? big.size() : 1 + rng() % 4096;
                sends.push_back(w.send(ep->get(), make_tag(channel, sender, token), big.data(), length));
            }
            w.wait_until(
                [&] {
                    for (auto& s : sends)
                        if (!s.done()) return false;
                    return true;
                },
                clock_type::now() + std::chrono::seconds(10));
            for (auto& s : sends) sent += s.done() && s.status() == UCS_OK;
            fmt::print("ps_rogue: sent {} of {} random frames without a handshake\n", sent, frames);
            for (auto& s : sends)
                if (!s.done()) s.cancel(w.get());
            ep->close(std::chrono::milliseconds(200), true);
        }

        // 3. Random bytes as the handshake's answer.
        {
            auto ep = endpoint::to_sockaddr(w, host, port, "the PS");
            std::vector<std::uint8_t> junk(300);
            for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
            auto s = w.send(ep->get(), make_tag(bootstrap_channel, 0), junk.data(), junk.size());
            w.wait_until([&] { return s.done(); }, clock_type::now() + std::chrono::seconds(5));
            fmt::print("ps_rogue: sent {} random bytes as a handshake answer\n", junk.size());
            ep->close(std::chrono::milliseconds(200), true);
        }
    } catch (const std::exception& e) {
        fmt::print(stderr, "ps_rogue: {}\n", e.what());
        return 1;
    }
    return 0;
}
