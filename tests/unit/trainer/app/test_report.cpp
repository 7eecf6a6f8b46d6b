// What a run reports to TensorBoard: the TFRecord framing and its CRC-32C,
// the Event messages, the events file a reporter writes, and the scalars
// each metrics event becomes.  (The integration test reads the files with
// TensorBoard's own reader.)
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE report
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/app/job_comment.hpp"
#include "trainer/app/report.hpp"
#include "trainer/app/tensorboard.hpp"
#include "trainer/app/tensorboard_event.pb.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

using namespace pstrain::trainer;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
    fs::path path;
    temp_dir()
    {
        std::string t = (fs::temp_directory_path() / "pstrain-test-report-XXXXXX").string();
        BOOST_TEST_REQUIRE(::mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~temp_dir() { fs::remove_all(path); }
};

std::uint64_t le(const std::string& s, std::size_t at, int bytes)
{
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<std::size_t>(i)]);
    return v;
}

// The records of a TFRecord file, each checked as TensorBoard's reader does.
std::vector<std::string> read_records(const fs::path& file)
{
    std::ifstream in(file, std::ios::binary);
    const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> out;
    std::size_t at = 0;
    while (at < s.size()) {
        BOOST_TEST_REQUIRE(at + 12 <= s.size(), "a truncated record header at byte " << at);
        const auto length = le(s, at, 8);
        BOOST_TEST_REQUIRE(le(s, at + 8, 4) == tensorboard::masked_crc32c(s.substr(at, 8)),
                           "the length's CRC at " << at);
        BOOST_TEST_REQUIRE(at + 12 + length + 4 <= s.size(), "a truncated record at byte " << at);
        const auto data = s.substr(at + 12, length);
        BOOST_TEST_REQUIRE(le(s, at + 12 + length, 4) == tensorboard::masked_crc32c(data), "the data's CRC at " << at);
        out.push_back(data);
        at += 12 + length + 4;
    }
    return out;
}

pstrain::tfevent::Event parse(const std::string& data)
{
    pstrain::tfevent::Event e;
    BOOST_TEST_REQUIRE(e.ParseFromString(data));
    return e;
}

std::map<std::string, double> as_map(const std::vector<tensorboard::scalar>& v)
{
    std::map<std::string, double> m;
    for (const auto& s : v) m[s.tag] = s.value;
    return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(crc32c_is_castagnolis_and_the_mask_is_tfrecords)
{
    // The check value of CRC-32C (RFC 3720's iSCSI CRC).
    BOOST_TEST(tensorboard::crc32c("123456789") == 0xE3069283u);
    BOOST_TEST(tensorboard::crc32c("") == 0u);
    // 32 zero bytes: RFC 3720, B.4.
    BOOST_TEST(tensorboard::crc32c(std::string(32, '\0')) == 0x8A9136AAu);
    // The mask rotates right by 15 bits and adds a constant.
    BOOST_TEST(tensorboard::masked_crc32c("") == 0xa282ead8u);
    const std::uint32_t c = 0xE3069283u;
    BOOST_TEST(tensorboard::masked_crc32c("123456789") ==
               static_cast<std::uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

BOOST_AUTO_TEST_CASE(a_record_is_length_crc_data_crc)
{
    const auto r = tensorboard::record("hello");
    BOOST_TEST(r.size() == 8u + 4 + 5 + 4);
    BOOST_TEST(le(r, 0, 8) == 5u);
    BOOST_TEST(le(r, 8, 4) == tensorboard::masked_crc32c(r.substr(0, 8)));
    BOOST_TEST(r.substr(12, 5) == "hello");
    BOOST_TEST(le(r, 17, 4) == tensorboard::masked_crc32c("hello"));
}

BOOST_AUTO_TEST_CASE(the_writer_starts_a_file_with_its_version_then_appends_scalars_at_their_steps)
{
    temp_dir d;
    const auto dir = d.path / "runs" / "a";  // made with its parents
    std::string path;
    {
        tensorboard::event_writer w(dir.string(), "--tensorboard-dir");
        path = w.path();
        const std::vector<tensorboard::scalar> first{{"loss/train", 0.5}, {"accuracy/train", 0.75}};
        w.write(100, first);
        w.write(200, std::vector<tensorboard::scalar>{{"loss/train", 0.25}, {"worker/0/staleness", 0.0}});
        w.write(300, std::vector<tensorboard::scalar>{});  // nothing to say: no event
        // Flushed at once: TensorBoard reads the file while the job runs.
        BOOST_TEST(read_records(path).size() == 3u);
    }
    BOOST_TEST(fs::path(path).parent_path() == dir);
    // Private, as the checkpoints beside it.
    BOOST_TEST((fs::status(dir).permissions() == fs::perms::owner_all));
    BOOST_TEST((fs::status(path).permissions() == (fs::perms::owner_read | fs::perms::owner_write)));
    BOOST_TEST(fs::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0u);
    const auto records = read_records(path);
    BOOST_TEST_REQUIRE(records.size() == 3u);
    const auto version = parse(records[0]);
    BOOST_TEST(version.file_version() == "brain.Event:2");
    BOOST_TEST(version.wall_time() > 1.7e9);
    const auto e1 = parse(records[1]);
    BOOST_TEST(e1.step() == 100);
    BOOST_TEST_REQUIRE(e1.summary().value_size() == 2);
    BOOST_TEST(e1.summary().value(0).tag() == "loss/train");
    BOOST_TEST(e1.summary().value(0).simple_value() == 0.5f);
    BOOST_TEST(e1.summary().value(1).tag() == "accuracy/train");
    BOOST_TEST(e1.summary().value(1).simple_value() == 0.75f);
    BOOST_TEST(e1.wall_time() >= version.wall_time());
    const auto e2 = parse(records[2]);
    BOOST_TEST(e2.step() == 200);
    BOOST_TEST(e2.summary().value(0).simple_value() == 0.25f);
    // A zero is a value too: present on the wire, as TensorBoard needs it.
    BOOST_TEST_REQUIRE(e2.summary().value_size() == 2);
    BOOST_TEST(e2.summary().value(1).has_simple_value());
    BOOST_TEST(e2.summary().value(1).simple_value() == 0.0f);

    // A second run into the same directory adds its own file.
    tensorboard::event_writer again(dir.string(), "--tensorboard-dir");
    BOOST_TEST(again.path() != path);
    BOOST_TEST(read_records(path).size() == 3u);
}

BOOST_AUTO_TEST_CASE(a_directory_that_cannot_be_made_is_one_error_naming_the_flag)
{
    temp_dir d;
    std::ofstream(d.path / "file") << "x";
    for (const auto& bad : {(d.path / "file").string(), (d.path / "file" / "under").string(), std::string()}) {
        try {
            tensorboard::event_writer w(bad, "--tensorboard-dir");
            BOOST_ERROR("an events file was made in '" << bad << "'");
        } catch (const pstrain::error& e) {
            const std::string what = e.what();
            BOOST_TEST(what.rfind("--tensorboard-dir", 0) == 0u, what);
            BOOST_TEST(what.find("give --tensorboard-dir a directory this job can write") != std::string::npos, what);
        }
    }
}

BOOST_AUTO_TEST_CASE(each_metrics_event_gives_its_scalars)
{
    auto progress = as_map(tensorboard_scalars({{"event", "progress"},
                                                {"global_step", 100},
                                                {"loss", 0.5},
                                                {"train_accuracy", 0.8},
                                                {"samples_per_sec", 1000.0},
                                                {"learning_rate", 0.01},
                                                {"eta_seconds", 3.0}}));
    BOOST_TEST(
        progress ==
        (std::map<std::string, double>{
            {"loss/train", 0.5}, {"accuracy/train", 0.8}, {"samples_per_sec", 1000.0}, {"learning_rate", 0.01}}));
    auto eval = as_map(tensorboard_scalars(
        {{"event", "eval"}, {"global_step", 100}, {"test_accuracy", 0.85}, {"test_cross_entropy", 0.4}}));
    BOOST_TEST(eval == (std::map<std::string, double>{{"accuracy/test", 0.85}, {"cross_entropy/test", 0.4}}));
    // The linear model's eval has no accuracy (null): only what is a number.
    auto linear = as_map(
        tensorboard_scalars({{"event", "eval"}, {"global_step", 5}, {"test_accuracy", nullptr}, {"test_mse", 0.01}}));
    BOOST_TEST(linear == (std::map<std::string, double>{{"mse/test", 0.01}}));
    const nlohmann::json cluster = {{"event", "cluster"},
                                    {"global_step", 100},
                                    {"workers",
                                     {{{"worker", 0}, {"steps_per_sec", 50.0}, {"staleness", 0.0}},
                                      {{"worker", 1}, {"steps_per_sec", 48.0}, {"staleness", 1.5}}}},
                                    {"ps", {{{"ps", 0}, {"received_bytes_per_sec", 2e6}, {"sent_bytes_per_sec", 1e6}}}},
                                    {"stale_gradients", 3.0}};
    BOOST_TEST(as_map(tensorboard_scalars(cluster)) ==
               (std::map<std::string, double>{{"worker/0/steps_per_sec", 50.0},
                                              {"worker/0/staleness", 0.0},
                                              {"worker/1/steps_per_sec", 48.0},
                                              {"worker/1/staleness", 1.5},
                                              {"stale_gradients", 3.0},
                                              {"ps/0/received_bytes_per_sec", 2e6},
                                              {"ps/0/sent_bytes_per_sec", 1e6}}));
    BOOST_TEST(tensorboard_scalars({{"event", "checkpoint"}, {"global_step", 100}}).empty());
    BOOST_TEST(tensorboard_scalars({{"event", "done"}, {"global_step", 100}, {"test_accuracy", 0.9}}).empty());
}

BOOST_AUTO_TEST_CASE(the_reporter_writes_the_same_figures_to_the_metrics_file_and_the_events_file)
{
    temp_dir d;
    report_config c;
    c.train_steps = 40;
    c.log_every = 10;
    c.metrics_file = (d.path / "metrics.jsonl").string();
    c.tensorboard_dir = (d.path / "events").string();
    c.learning_rate = 0.05;
    {
        reporter r(c);
        int logged = 0;
        for (int step = 1; step <= 40; ++step) {
            if (!r.step(step, 1.0 / step, step % 2 ? 0.5 : 1.0, 100)) continue;
            ++logged;
            std::vector<pstrain::ps::ps_stats> stats(1);
            stats[0].step = static_cast<std::uint64_t>(step);
            stats[0].bytes_received = 1000u * static_cast<std::uint64_t>(step);
            stats[0].workers.push_back({static_cast<std::uint64_t>(step), 0, 0, 0});
            r.cluster(step, stats);
        }
        BOOST_TEST(logged == 4);
        r.record({{"event", "eval"}, {"global_step", 40}, {"test_accuracy", 0.875}});
    }
    // Every scalar of every metrics line is in the events file at its step.
    std::ifstream metrics(c.metrics_file);
    std::multimap<std::int64_t, std::pair<std::string, float>> expected;
    for (std::string line; std::getline(metrics, line);) {
        const auto j = nlohmann::json::parse(line);
        BOOST_TEST(j.contains("elapsed_seconds"));
        if (j["event"] == "progress") {
            BOOST_TEST(j["learning_rate"].get<double>() == 0.05);
            BOOST_TEST(j["train_accuracy"].get<double>() == 0.75);  // the mean over the 10 batches
        }
        for (const auto& s : tensorboard_scalars(j))
            expected.insert({j["global_step"].get<std::int64_t>(), {s.tag, static_cast<float>(s.value)}});
    }
    BOOST_TEST(expected.size() == 4u * 4 + 4u * 5 + 1);  // progress 4 tags, cluster 5 (1 worker, 1 PS), eval 1
    std::multimap<std::int64_t, std::pair<std::string, float>> written;
    const auto files = std::vector<fs::directory_entry>(fs::directory_iterator(d.path / "events"), {});
    BOOST_TEST_REQUIRE(files.size() == 1u);
    for (const auto& rec : read_records(files[0].path())) {
        const auto e = parse(rec);
        for (const auto& v : e.summary().value()) written.insert({e.step(), {v.tag(), v.simple_value()}});
    }
    BOOST_TEST((written == expected));
}

// The run's end goes to the metrics file as a "done" event, the final
// line's fields in it: what train.sh reads to know training completed.
BOOST_AUTO_TEST_CASE(the_runs_end_is_the_last_line_of_the_metrics_file)
{
    temp_dir d;
    report_config c;
    c.train_steps = 40;
    c.metrics_file = (d.path / "metrics.jsonl").string();
    {
        reporter r(c);
        r.record({{"event", "eval"}, {"global_step", 40}, {"test_accuracy", 0.875}});
        r.finish({{"event", "done"}, {"global_step", 40}, {"test_accuracy", 0.875}, {"workers", 2}});
    }
    std::ifstream metrics(c.metrics_file);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(metrics, line);) lines.push_back(nlohmann::json::parse(line));
    BOOST_TEST_REQUIRE(lines.size() == 2u);
    BOOST_TEST(lines[1]["event"] == "done");
    BOOST_TEST(lines[1]["global_step"] == 40);
    BOOST_TEST(lines[1]["test_accuracy"] == 0.875);
    BOOST_TEST(lines[1].contains("elapsed_seconds"));
}

// A sync rollback (a spare restored a lost PS from the checkpoint at step
// 150, the job had reached 250): the next progress line is at 200 again, and
// the events file, which began with a SessionLog START at step 1 (the run's
// beginning, to TensorBoard's server), says with a second START at 151 that
// what it held for steps 151 on is out of date (TensorBoard drops it; the
// integration test reads the files with TensorBoard's own readers).
BOOST_AUTO_TEST_CASE(a_rollback_logs_the_steps_again_after_a_session_start_tensorboard_purges_at)
{
    temp_dir d;
    report_config c;
    c.train_steps = 1000;
    c.log_every = 100;
    c.tensorboard_dir = (d.path / "events").string();
    std::vector<std::int64_t> logged;
    {
        reporter r(c);
        r.starts_at(0, "");
        for (int step = 1; step <= 250; ++step)
            if (r.step(step, 0.5, 0.5, 10)) logged.push_back(step);
        r.went_back(250, 150, "/ckpt/ckpt-0000000150.json");
        for (int step = 151; step <= 250; ++step)
            if (r.step(step, 0.25, 0.5, 10)) logged.push_back(step);
    }
    BOOST_TEST((logged == std::vector<std::int64_t>{100, 200, 200}), "the steps trained again are logged again");
    const auto files = std::vector<fs::directory_entry>(fs::directory_iterator(d.path / "events"), {});
    BOOST_TEST_REQUIRE(files.size() == 1u);
    std::vector<std::string> seen;  // "summary 200", "start 151 /ckpt/..."
    for (const auto& rec : read_records(files[0].path())) {
        const auto e = parse(rec);
        if (e.has_session_log()) {
            BOOST_TEST(e.session_log().status() == pstrain::tfevent::SessionLog::START);
            seen.push_back(fmt::format("start {} {}", e.step(), e.session_log().checkpoint_path()));
        } else if (e.has_summary()) {
            seen.push_back(fmt::format("summary {} {}", e.step(), e.summary().value(0).simple_value()));
        }
    }
    BOOST_TEST((seen == std::vector<std::string>{"start 1 ", "summary 100 0.5", "summary 200 0.5",
                                                 "start 151 /ckpt/ckpt-0000000150.json", "summary 200 0.25"}),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_failure_comment_names_the_lost_task_and_its_node_on_one_line)
{
    using pstrain::trainer::failure_comment;
    BOOST_TEST(
        failure_comment(812, "lost ps 0 (n1): silent for 30 s (heartbeats every 5 s, address 10.251.0.11): its node "
                             "is unreachable or down; raise --heartbeat-interval if ...") ==
        "failed at step 812: lost ps 0 (n1): silent for 30 s (heartbeats every 5 s, address 10.251.0.11): its node is "
        "unreachable or down");
    BOOST_TEST(failure_comment(1, "a\nb") == "failed at step 1: a b");
    BOOST_TEST(failure_comment(1, std::string(1000, 'x')).size() == 300u);
}
