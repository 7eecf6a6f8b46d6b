// The join file of an --elastic PMIx job: written by the chief, read by
// `pstrain --join`; every bad one is one line naming the fix.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE join_file
#include <boost/test/unit_test.hpp>

#include "pstrain/error.hpp"
#include "trainer/app/join_file.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>

using namespace pstrain::trainer;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
    fs::path path;
    temp_dir()
    {
        char name[] = "/tmp/pstrain-join-XXXXXX";
        path = ::mkdtemp(name);
    }
    ~temp_dir() { fs::remove_all(path); }
};

pstrain::bootstrap::join_info two_ps()
{
    pstrain::bootstrap::join_info j;
    j.ps = {"n1:40001", "n2:40002"};
    j.num_workers = 3;
    for (std::size_t i = 0; i < j.key.size(); ++i) j.key[i] = static_cast<std::uint8_t>(i);
    return j;
}

std::string error_of(train_options o)
{
    try {
        apply_join_file(o);
    } catch (const pstrain::error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_written_join_file_gives_the_classic_flags_and_the_key)
{
    temp_dir d;
    const auto path = write_join_file(d.path.string(), two_ps());
    BOOST_TEST(path == (d.path / "join").string());
    struct stat st {};
    BOOST_TEST_REQUIRE(::stat(path.c_str(), &st) == 0);
    BOOST_TEST((st.st_mode & 0777) == 0600u);
    BOOST_TEST(!fs::exists(path + ".tmp"));
    train_options o;
    o.join = path;
    o.task_index = 2;
    ::setenv("PSTRAIN_AUTH_KEY_FILE", "/elsewhere", 1);
    apply_join_file(o);
    BOOST_TEST(o.ps_hosts == "n1:40001,n2:40002");
    BOOST_TEST(o.job_name == "worker");
    BOOST_TEST(o.worker_hosts.starts_with("joined:1,joined:1,"));
    BOOST_TEST(std::string(std::getenv("PSTRAIN_AUTH_KEY")) ==
               "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
    BOOST_TEST(std::getenv("PSTRAIN_AUTH_KEY_FILE") == nullptr);
}

BOOST_AUTO_TEST_CASE(a_bad_join_or_task_index_is_one_line_naming_the_fix)
{
    temp_dir d;
    const auto path = write_join_file(d.path.string(), two_ps());
    train_options o;
    o.join = path;
    o.task_index = 0;
    BOOST_TEST(error_of(o) == "--join " + path +
                                  ": give --task-index I of the lost worker whose place to take (or of a new one, in "
                                  "room the job keeps with --max-workers), 1 to 2 (worker 0 is the chief: a lost "
                                  "chief ends the job)");
    o.task_index = 1;
    o.ps_hosts = "n1:1";
    BOOST_TEST(error_of(o) ==
               "--join " + path +
                   " takes the cluster from its file: leave --ps-hosts, --worker-hosts and --job-name out");
    o.ps_hosts.clear();
    o.join = (d.path / "missing").string();
    BOOST_TEST(error_of(o) == "--join " + o.join +
                                  ": cannot read it (No such file or directory): the chief of an --elastic job started "
                                  "with --checkpoint-dir DIR writes DIR/join once every task has started");
    std::ofstream(d.path / "other") << "ps n1:1\n";
    o.join = (d.path / "other").string();
    BOOST_TEST(error_of(o) == "--join " + o.join +
                                  ": its first line is not a pstrain join file's: give the file DIR/join that the "
                                  "chief of the running job wrote");
    std::string text;
    std::getline(std::ifstream(path), text);  // the header
    std::ofstream(d.path / "short-key") << text << "\nps n1:40001\nworkers 3\nkey 0011\n";
    o.join = (d.path / "short-key").string();
    BOOST_TEST(error_of(o) == "--join " + o.join +
                                  ": its key line is malformed: give the file DIR/join that the chief of the running "
                                  "job wrote");
}
