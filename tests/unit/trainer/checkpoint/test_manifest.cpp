#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE checkpoint_manifest
#include <boost/test/unit_test.hpp>

#include "tests/unit/allocation_probe.hpp"
#include "tests/unit/trainer/checkpoint/helpers.hpp"
#include "trainer/checkpoint/manifest.hpp"

#include <regex>

#include <sys/stat.h>
#include <zlib.h>

using namespace pstrain;
using namespace pstrain::checkpoint;
using namespace pstrain::testing;
namespace fs = std::filesystem;

namespace {

manifest sample_manifest()
{
    manifest m;
    m.global_step = 42;
    m.created = "2024-05-01T12:00:00Z";
    m.mode = "async";
    m.model = "784-100-10 mlp";
    m.num_params = 79510;
    m.tensors = nlohmann::json::array({{{"name", "w1"}, {"shape", {784, 100}}}});
    m.optimizer = "adam";
    m.state_slots = 2;
    m.seed = 9;
    m.batch_size = 64;
    m.positions = {40, 44};
    m.shards = {{"ckpt-0000000042.shard-0-of-2", {0, 39755}, 477100, 0xdeadbeefu, 42},
                {"ckpt-0000000042.shard-1-of-2", {39755, 79510}, 477100, 0x12345678u, 43}};
    return m;
}

// Replaces `from` by `to` in the manifest file, and its crc32 by that of
// the changed content, as a tool that knows the format would.
void rewrite_with_crc(const std::string& path, const std::string& from, const std::string& to)
{
    auto j = nlohmann::json::parse(read_text(path));
    j.erase("crc32");
    auto text = j.dump();
    text.replace(text.find(from), from.size(), to);
    j = nlohmann::json::parse(text);
    const auto body = j.dump();
    j["crc32"] = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    write_text(path, j.dump(2));
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_sort_by_step)
{
    BOOST_TEST(manifest_name(1200) == "ckpt-0000001200.json");
    BOOST_TEST(shard_name(1200, 1, 2) == "ckpt-0000001200.shard-1-of-2");
    BOOST_TEST(manifest_name(999) < manifest_name(1000));
}

BOOST_AUTO_TEST_CASE(names_are_told_apart_with_their_step)
{
    auto kind_of = [](const std::string& name) { return classify_name(name).kind; };
    BOOST_TEST(kind_of("ckpt-0000001200.json") == name_kind::manifest);
    BOOST_TEST(classify_name("ckpt-0000001200.json").step == 1200u);
    BOOST_TEST(kind_of("ckpt-0000001200.shard-1-of-2") == name_kind::shard);
    BOOST_TEST(classify_name("ckpt-0000001200.shard-1-of-2").step == 1200u);
    BOOST_TEST(kind_of("ckpt-0000000035.shard-0-of-2.tmp.123") == name_kind::temp);
    BOOST_TEST(classify_name("ckpt-0000000035.shard-0-of-2.tmp.123").step == 35u);
    BOOST_TEST(kind_of("ckpt-0000000035.json.tmp.77") == name_kind::temp);
    BOOST_TEST(classify_name("ckpt-9999999999999999999.json").step == 9999999999999999999ull);  // 19 digits, the most
    // what a user may keep beside the checkpoints is left alone
    for (const char* other : {"notes.txt", "ckpt-12.json.bak", "ckpt-.json", "ckpt-12.shard-1",
                              ".pstrain-probe-node1-12", "ckpt-00000000000000000001.json", "xckpt-12.json"})
        BOOST_TEST((kind_of(other) == name_kind::other), other);
}

BOOST_AUTO_TEST_CASE(manifest_round_trip_and_private_file)
{
    temp_dir d;
    const auto m = sample_manifest();
    write_manifest(d.path, m);
    BOOST_TEST(names_in(d.path) == std::vector<std::string>{"ckpt-0000000042.json"}, boost::test_tools::per_element());
    struct stat st {};
    ::stat((d.path + "/" + manifest_name(42)).c_str(), &st);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    const auto r = read_manifest(d.path, manifest_name(42));
    BOOST_TEST(r.global_step == 42u);
    BOOST_TEST(r.created == "2024-05-01T12:00:00Z");
    BOOST_TEST(r.mode == "async");
    BOOST_TEST(r.model == "784-100-10 mlp");
    BOOST_TEST(r.num_params == 79510u);
    BOOST_TEST(r.tensors == m.tensors);
    BOOST_TEST(r.optimizer == "adam");
    BOOST_TEST(r.state_slots == 2);
    BOOST_TEST(r.seed == 9u);
    BOOST_TEST(r.batch_size == 64);
    BOOST_TEST(r.positions == m.positions, boost::test_tools::per_element());
    BOOST_TEST_REQUIRE(r.shards.size() == 2u);
    for (std::size_t i = 0; i < 2; ++i) {
        BOOST_TEST(r.shards[i].file == m.shards[i].file);
        BOOST_TEST(r.shards[i].range.begin == m.shards[i].range.begin);
        BOOST_TEST(r.shards[i].range.end == m.shards[i].range.end);
        BOOST_TEST(r.shards[i].bytes == m.shards[i].bytes);
        BOOST_TEST(r.shards[i].crc32 == m.shards[i].crc32);
        BOOST_TEST(r.shards[i].step == m.shards[i].step);
    }
}

// The JSON on disk is the documented format, its crc32 that of the compact
// dump of everything else.
BOOST_AUTO_TEST_CASE(a_manifest_has_the_documented_layout)
{
    temp_dir d;
    write_manifest(d.path, sample_manifest());
    const auto text = read_text(d.path + "/" + manifest_name(42));
    BOOST_TEST(text.back() == '\n');
    auto j = nlohmann::json::parse(text);
    BOOST_TEST(text == j.dump(2) + "\n");
    BOOST_TEST(j.at("format").get<std::string>() == "pstrain-checkpoint");
    BOOST_TEST(j.at("version").get<int>() == 1);
    BOOST_TEST(j.at("global_step").get<int>() == 42);
    BOOST_TEST(j.at("model").at("description").get<std::string>() == "784-100-10 mlp");
    BOOST_TEST(j.at("optimizer").at("state_slots").get<int>() == 2);
    BOOST_TEST(j.at("data").at("worker_batches").dump() == "[40,44]");
    BOOST_TEST(
        j.at("shards").at(1).dump() ==
        R"({"bytes":477100,"crc32":305419896,"file":"ckpt-0000000042.shard-1-of-2","range":[39755,79510],"step":43})");
    const auto stored = j.at("crc32").get<std::uint32_t>();
    j.erase("crc32");
    const auto body = j.dump();
    BOOST_TEST(stored == static_cast<std::uint32_t>(
                             crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

BOOST_AUTO_TEST_CASE(the_job_that_wrote_it_and_the_time_trained_round_trip)
{
    temp_dir d;
    auto m = sample_manifest();
    m.job = job_identity{"c1", "4", "20261124T193000-a1b2c3d4", "2026-11-24T19:30:00Z"};
    m.trained_seconds = 12.3456;
    m.trained_samples = 98765;
    write_manifest(d.path, m);
    const auto j = nlohmann::json::parse(read_text(d.path + "/" + manifest_name(42)));
    BOOST_TEST(
        j.at("job").dump() ==
        R"({"cluster":"c1","job_id":"4","submission":"20261124T193000-a1b2c3d4","submit_time":"2026-11-24T19:30:00Z"})");
    BOOST_TEST(j.at("trained").dump() == R"({"milliseconds":12346,"samples":98765})");
    const auto r = read_manifest(d.path, manifest_name(42));
    BOOST_REQUIRE(r.job.has_value());
    BOOST_TEST(r.job->cluster == "c1");
    BOOST_TEST(r.job->job_id == "4");
    BOOST_TEST(r.job->submission == "20261124T193000-a1b2c3d4");
    BOOST_TEST(r.job->submit_time == "2026-11-24T19:30:00Z");
    BOOST_TEST(r.job->same_job(*m.job));
    BOOST_TEST(r.trained_seconds == 12.346, boost::test_tools::tolerance(1e-9));
    BOOST_TEST(r.trained_samples == 98765u);
    BOOST_TEST(r.job->describe() ==
               "cluster c1, job 4, submission 20261124T193000-a1b2c3d4 (submitted 2026-11-24T19:30:00Z)");
}

BOOST_AUTO_TEST_CASE(a_manifest_without_job_or_training_time_reads_as_none)
{
    // What pstrain wrote before it recorded the job, and what a run outside Slurm writes.
    temp_dir d;
    write_manifest(d.path, sample_manifest());
    const auto path = d.path + "/" + manifest_name(42);
    BOOST_TEST(read_text(path).find("\"job\"") == std::string::npos);
    auto j = nlohmann::json::parse(read_text(path));
    j.erase("crc32");
    j.erase("trained");
    const auto body = j.dump();
    j["crc32"] = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    write_text(path, j.dump(2));
    const auto r = read_manifest(d.path, manifest_name(42));
    BOOST_TEST(!r.job.has_value());
    BOOST_TEST(r.trained_seconds == 0.0);
    BOOST_TEST(r.trained_samples == 0u);
}

BOOST_AUTO_TEST_CASE(a_changed_job_is_a_checksum_mismatch_and_a_bad_one_is_named)
{
    temp_dir d;
    auto m = sample_manifest();
    m.job = job_identity{"c1", "4", "20261124T193000-a1b2c3d4", "2026-11-24T19:30:00Z"};
    write_manifest(d.path, m);
    const auto file = manifest_name(42), path = d.path + "/" + file;
    const auto good = read_text(path);
    auto text = good;
    text.replace(text.find("\"job_id\": \"4\""), 13, "\"job_id\": \"5\"");
    write_text(path, text);
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) ==
               file + ": checksum mismatch (the manifest was changed or is corrupt)");
    write_text(path, good);
    rewrite_with_crc(path, "\"job_id\":\"4\"", "\"job_id\":4");
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }).find(file + ": unreadable (") == 0u);
}

BOOST_AUTO_TEST_CASE(write_manifest_stamps_the_time_when_none_is_given)
{
    temp_dir d;
    auto m = sample_manifest();
    m.created.clear();
    write_manifest(d.path, m);
    const auto r = read_manifest(d.path, manifest_name(42));
    BOOST_TEST(std::regex_match(r.created, std::regex(R"(20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ)")), r.created);
}

BOOST_AUTO_TEST_CASE(a_changed_manifest_is_refused)
{
    temp_dir d;
    write_checkpoint(d.path, 10, 300, 1);
    change_manifest_step(d.path, 10);
    BOOST_TEST(error_of([&] { read_manifest(d.path, manifest_name(10)); }) ==
               "ckpt-0000000010.json: checksum mismatch (the manifest was changed or is corrupt)");
}

BOOST_AUTO_TEST_CASE(a_manifest_of_another_kind_or_version_is_refused)
{
    temp_dir d;
    write_manifest(d.path, sample_manifest());
    const auto file = manifest_name(42), path = d.path + "/" + file;
    const auto good = read_text(path);
    rewrite_with_crc(path, "\"version\":1", "\"version\":2");
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) ==
               file + ": format version 2, this pstrain reads version 1");
    write_text(path, good);
    rewrite_with_crc(path, "\"pstrain-checkpoint\"", "\"something-else\"");
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) == file + ": not a pstrain checkpoint manifest");
    write_text(path, "{\"format\": \"pstrain-checkpoint\", \"ver");
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }).find(file + ": unreadable (") == 0u);
    write_text(path, good);
    rewrite_with_crc(path, "\"mode\":\"async\",", "");
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }).find(file + ": unreadable (") == 0u);
    fs::remove(path);
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) == path + ": No such file or directory");
}

// Found by tests/fuzz/fuzz_manifest's harness under UBSan (an input
// replayed): "version": 1e300 reached get<int>(), whose cast of a double
// beyond int is undefined behaviour.  A number that is not an integer is
// refused as unreadable, before any field is read.
BOOST_AUTO_TEST_CASE(a_number_that_is_not_an_integer_is_refused)
{
    temp_dir d;
    write_manifest(d.path, sample_manifest());
    const auto file = manifest_name(42), path = d.path + "/" + file;
    for (const char* bad : {"\"version\":1e300", "\"version\":1.0"}) {
        write_text(path, std::string("{\"format\":\"pstrain-checkpoint\",") + bad + "}");
        const auto e = error_of([&] { read_manifest(d.path, file); });
        BOOST_TEST(e.find(file + ": unreadable (") == 0u, e);
        BOOST_TEST(e.find("not an integer") != std::string::npos, e);
    }
}

// The manifest names files the restore opens: none outside the directory,
// and at least one.
BOOST_AUTO_TEST_CASE(a_manifest_naming_no_shard_or_a_path_is_refused)
{
    temp_dir d;
    auto m = sample_manifest();
    m.shards[1].file = "../elsewhere";
    write_manifest(d.path, m);
    BOOST_TEST(error_of([&] { read_manifest(d.path, manifest_name(42)); }) ==
               "ckpt-0000000042.json: a shard name holds a '/'");
    m.shards.clear();
    write_manifest(d.path, m);
    BOOST_TEST(error_of([&] { read_manifest(d.path, manifest_name(42)); }) ==
               "ckpt-0000000042.json: it names no shard");
}

// Sizes a restore would allocate by are checked when the manifest is read:
// the number of optimizer state slots, and every shard's range against the
// model's parameters (a tool that knows the format can write any of them
// with a good checksum).
BOOST_AUTO_TEST_CASE(a_manifest_with_impossible_sizes_is_refused)
{
    temp_dir d;
    const auto file = manifest_name(42);
    for (int slots : {-1, 3, 1 << 30}) {
        auto m = sample_manifest();
        m.state_slots = slots;
        write_manifest(d.path, m);
        BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) ==
                   fmt::format("{}: it names {} optimizer state slots, where an optimizer has 0 to 2", file, slots));
    }
    struct range {
        std::uint64_t begin, end;
    };
    for (auto [b, e] : {range{39755, 79511}, range{39755, 39754}, range{0, ~std::uint64_t(0)},
                        range{std::uint64_t(1) << 62, 79510}}) {
        auto m = sample_manifest();
        m.shards[1].range = {b, e};
        write_manifest(d.path, m);
        BOOST_TEST(
            error_of([&] { read_manifest(d.path, file); }) ==
            fmt::format("{}: ckpt-0000000042.shard-1-of-2 holds the range [{}, {}), which is not inside the model's "
                        "79510 parameters",
                        file, b, e));
    }
}

// The manifest is read whole, up to 64 MiB: a larger file is named by its
// size, before any of it is read.
BOOST_AUTO_TEST_CASE(a_manifest_larger_than_64_mib_is_refused_unread)
{
    temp_dir d;
    const auto file = manifest_name(42);
    write_manifest(d.path, sample_manifest());
    fs::resize_file(d.path + "/" + file, (std::uintmax_t(64) << 20) + 1);
    allocation_probe probe;
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) ==
               file + ": larger than 64 MiB, which no manifest pstrain writes is: not a checkpoint manifest");
    BOOST_TEST(probe.largest() < std::size_t(1) << 20);
}

BOOST_AUTO_TEST_CASE(the_precision_round_trips_and_an_older_manifest_means_fp32)
{
    temp_dir d;
    auto m = sample_manifest();
    m.precision = "bf16";
    write_manifest(d.path, m);
    const auto path = d.path + "/" + manifest_name(42);
    BOOST_TEST(nlohmann::json::parse(read_text(path)).at("compute").dump() == R"({"precision":"bf16"})");
    BOOST_TEST(read_manifest(d.path, manifest_name(42)).precision == "bf16");
    // What pstrain wrote before it recorded the precision.
    auto j = nlohmann::json::parse(read_text(path));
    j.erase("crc32");
    j.erase("compute");
    const auto body = j.dump();
    j["crc32"] = static_cast<std::uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    write_text(path, j.dump(2));
    BOOST_TEST(read_manifest(d.path, manifest_name(42)).precision == "fp32");
}

BOOST_AUTO_TEST_CASE(an_unknown_precision_is_named)
{
    temp_dir d;
    write_manifest(d.path, sample_manifest());
    const auto file = manifest_name(42), path = d.path + "/" + file;
    rewrite_with_crc(path, R"("precision":"fp32")", R"("precision":"fp16")");
    BOOST_TEST(error_of([&] { read_manifest(d.path, file); }) ==
               file + ": it names the precision 'fp16', where pstrain computes in fp32 or bf16");
}
