// libFuzzer target: the parameter-server protocol as a PS decodes it.  A
// real server (one PS of 8 parameters, async, the library's own code) runs
// on the in-process loopback transport; both of its workers are the fuzzer,
// which writes raw frames and payloads through their transports, as a
// rogue or broken peer could.  Input: a sequence of messages, each
//   1 byte   bit 0: from worker 1 (else worker 0, the chief);
//            bit 1: a payload comes first (sent before the frame, as a
//            client sends it)
//   [1 byte  the payload's length L, then L bytes]   (with bit 1)
//   64 bytes the frame (wire::frame: magic, version, kind, payload_bytes, body)
// (a hello's num_params is taken modulo 65536: see below).  Then both
// workers are lost, and the server must end within seconds,
// whatever it received, with its outcome or a pstrain::error: never
// another exception, a crash, a sanitizer report or a hang.
#include "pstrain/error.hpp"
#include "tests/unit/library/ps/loopback_job.hpp"
#include "library/ps/protocol.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

using namespace pstrain::ps;
using namespace std::chrono_literals;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    server_config config;
    config.training.optimizer.learning_rate = 0.5f;
    config.shutdown_wait = 0s;
    // One embedding table, so that sparse requests reach a table too (the
    // seeds' hellos say so).
    embedding_config table;
    table.dim = 2;
    table.admit_after = 2;
    table.max_rows = 64;
    config.training.tables = {table};
    pstrain::testing::job_options o;
    o.num_params = 8;
    o.share_memory = false;
    o.client_timeout = 1s;
    pstrain::testing::ps_job job(1, 2, config, {}, o);
    transport* workers[2] = {&job.net().worker(0), &job.net().worker(1)};

    std::deque<wire::frame> frames;
    std::deque<std::vector<std::uint8_t>> payloads;
    std::vector<std::pair<transport*, transfer>> sends;
    std::size_t at = 0;
    while (at < size) {
        const std::uint8_t head = data[at++];
        transport& t = *workers[head & 1];
        if (head & 2) {
            if (at >= size) break;
            const std::size_t len = data[at++];
            if (size - at < len) break;
            payloads.emplace_back(data + at, data + at + len);
            at += len;
            if (len > 0) sends.emplace_back(&t, t.send(0, channel::payload, payloads.back().data(), len));
        }
        if (size - at < sizeof(wire::frame)) break;
        frames.emplace_back();
        std::memcpy(&frames.back(), data + at, sizeof(wire::frame));
        // The chief's hello sizes the model, and the PS allocates its shard
        // of it by design (a std::bad_alloc becomes an error naming the
        // chief).  Under AddressSanitizer operator new aborts instead of
        // throwing, so the target keeps the models it announces small.
        if (frames.back().kind == static_cast<std::uint16_t>(wire::kind::hello)) {
            auto h = wire::body<wire::hello>(frames.back());
            h.num_params &= 0xffff;
            std::memcpy(frames.back().body, &h, sizeof h);
        }
        at += sizeof(wire::frame);
        sends.emplace_back(&t, t.send(0, channel::control, &frames.back(), sizeof(wire::frame)));
    }
    // Until the server has taken every message, or has ended.
    const auto deadline = clock::now() + 2s;
    for (auto& send : sends) {
        transport* t = send.first;
        transfer& r = send.second;
        t->wait_until([&] { return r.complete() || t->failed(0); }, deadline);
        if (job.finish(0, 0ms).returned) break;
    }
    job.net().kill_worker(0);
    job.net().kill_worker(1);
    const auto end = job.finish(0, 10s);
    if (!end.returned) __builtin_trap();                    // a hang
    if (end.threw && !end.pstrain_error) __builtin_trap();  // not a pstrain::error
    for (auto& send : sends) send.second.cancel();
    return 0;
}
