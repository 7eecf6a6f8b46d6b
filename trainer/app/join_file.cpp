#include "trainer/app/join_file.hpp"

#include "pstrain/error.hpp"
#include "library/transport/handshake.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

namespace pstrain::trainer {

namespace {

constexpr const char* header =
    "# pstrain join file: pstrain --join FILE --task-index I takes lost worker I's place, or joins as a new worker "
    "I in room the job keeps (--max-workers)";

}  // namespace

// Three lines after the header: "ps HOST:PORT ...", "workers N", "key HEX".
std::string write_join_file(const std::string& dir, const bootstrap::join_info& join)
{
    const auto path = dir + "/join";
    const auto temporary = path + ".tmp";
    std::string text = std::string(header) + "\nps";
    for (const auto& p : join.ps) text += " " + p;
    text += fmt::format("\nworkers {}\nkey ", join.num_workers);
    for (auto b : join.key) text += fmt::format("{:02x}", b);
    text += "\n";
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw error(fmt::format("cannot write the join file {}: {}", temporary, std::strerror(errno)));
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
        const int why = written ? errno : saved;
        ::unlink(temporary.c_str());
        throw error(fmt::format("cannot write the join file {}: {}", path, std::strerror(why)));
    }
    return path;
}

void apply_join_file(train_options& o)
{
    const auto& file = o.join;
    if (!o.ps_hosts.empty() || !o.worker_hosts.empty() || !o.job_name.empty())
        throw error(fmt::format("--join {} takes the cluster from its file: leave --ps-hosts, --worker-hosts and "
                                "--job-name out",
                                file));
    std::ifstream in(file);
    if (!in)
        throw error(fmt::format("--join {}: cannot read it ({}): the chief of an --elastic job started with "
                                "--checkpoint-dir DIR writes DIR/join once every task has started",
                                file, std::strerror(errno)));
    std::string line, ps_line, workers_line, key_line;
    std::getline(in, line);
    if (line != header)
        throw error(fmt::format("--join {}: its first line is not a pstrain join file's: give the file DIR/join that "
                                "the chief of the running job wrote",
                                file));
    std::getline(in, ps_line);
    std::getline(in, workers_line);
    std::getline(in, key_line);
    const auto bad = [&](const char* what) {
        return error(fmt::format("--join {}: its {} line is malformed: give the file DIR/join that the chief of the "
                                 "running job wrote",
                                 file, what));
    };
    std::istringstream ps(ps_line);
    std::string word, hosts;
    ps >> word;
    if (word != "ps") throw bad("ps");
    while (ps >> word) hosts += (hosts.empty() ? "" : ",") + word;
    if (hosts.empty()) throw bad("ps");
    int workers = 0;
    if (std::sscanf(workers_line.c_str(), "workers %d", &workers) != 1 || workers < 1) throw bad("workers");
    if (key_line.rfind("key ", 0) != 0 || !ucx::parse_key(key_line.substr(4))) throw bad("key");
    if (o.task_index < 1 || o.task_index >= workers)
        throw error(
            fmt::format("--join {}: give --task-index I of the lost worker whose place to take (or of a new "
                        "one, in room the job keeps with --max-workers), 1 to {} (worker 0 is the chief: a lost chief "
                        "ends the job)",
                        file, workers - 1));
    o.ps_hosts = hosts;
    o.job_name = "worker";
    o.max_workers = 0;  // the file's worker count is the job's room: a joiner's own --max-workers would differ
    // The other workers' hosts name them only: this one's is this host (a
    // worker listens on no port).
    char here[256] = {};
    ::gethostname(here, sizeof here - 1);
    for (int w = 0; w < workers; ++w)
        o.worker_hosts += fmt::format("{}{}:1", w ? "," : "", w == o.task_index ? here : "joined");
    ::setenv("PSTRAIN_AUTH_KEY", key_line.substr(4).c_str(), 1);
    ::unsetenv("PSTRAIN_AUTH_KEY_FILE");
}

}  // namespace pstrain::trainer
