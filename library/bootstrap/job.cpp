#include "library/bootstrap/job.hpp"

#include "pstrain/error.hpp"
#include "common/hostlist.hpp"
#include "common/log.hpp"
#include "common/parse.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <sys/stat.h>

#include <fmt/format.h>

namespace pstrain::bootstrap {
namespace {

std::optional<std::string> env(const char* name)
{
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
}

int env_count(const char* name, int lo, int hi)
{
    auto v = env(name);
    auto n = v ? parse_count(*v, lo, hi) : std::nullopt;
    if (!n)
        throw error(
            fmt::format("{}={} is not valid: run under srun with --ps=N --workers=M", name, v.value_or("(unset)")));
    return static_cast<int>(*n);
}

std::vector<std::string> split_hosts(const std::string& text, const char* flag)
{
    std::vector<std::string> out;
    for (std::string_view item : split(text, ',')) {
        try {
            split_host_port(item);
        } catch (const error& e) {
            throw error(fmt::format("{} {}: {}: give a comma list of host:port", flag, text, e.what()));
        }
        out.emplace_back(item);
    }
    return out;
}

}  // namespace

std::string job::name() const { return fmt::format("{} {}", role_name(me.role), me.index); }

std::string job::peer_name(role r, int index) const
{
    const auto& list = spec.tasks(r);
    // A worker beyond the spec: room an elastic job keeps for one that joins later.
    if (r == role::worker && static_cast<std::size_t>(index) >= list.size() && index < slots())
        return fmt::format("{} {} (new)", role_name(r), index);
    std::string host = static_cast<std::size_t>(index) < list.size() ? split_host_port(list[index]).first : "?";
    std::string chief = r == role::worker && index == 0 ? ", the chief" : "";
    return fmt::format("{} {} ({}{})", role_name(r), index, host, chief);
}

start_verdict judge_start(const std::vector<std::string>& errors, const std::vector<std::string>& names, std::size_t me,
                          std::size_t chief)
{
    // Who reports an error: the chief when it has it, else the first task that has it.
    const auto reporter_of = [&](const std::string& e) {
        if (chief < errors.size() && errors[chief] == e) return chief;
        return static_cast<std::size_t>(std::find(errors.begin(), errors.end(), e) - errors.begin());
    };
    const auto name = [&](std::size_t i) { return i < names.size() ? names[i] : fmt::format("rank {}", i); };
    if (me < errors.size() && !errors[me].empty()) {
        const auto r = reporter_of(errors[me]);
        if (r == me) return {start_verdict::action::report, {}};
        return {start_verdict::action::stop, fmt::format("stopped: {} reported the same error at start-up", name(r))};
    }
    std::size_t first = chief < errors.size() && !errors[chief].empty() ? chief : errors.size();
    for (std::size_t i = 0; first == errors.size() && i < errors.size(); ++i)
        if (!errors[i].empty()) first = i;
    if (first == errors.size()) return {};
    return {start_verdict::action::stop, fmt::format("stopped: {} reported an error at start-up", name(first))};
}

std::vector<std::string> peer_names(const job& j)
{
    const role peer = j.me.role == role::ps ? role::worker : role::ps;
    std::vector<std::string> names;
    for (std::size_t i = 0; i < j.spec.tasks(peer).size(); ++i) names.push_back(j.peer_name(peer, static_cast<int>(i)));
    // A PS's room for workers that join later: "worker 2 (new)".
    if (peer == role::worker)
        for (int i = static_cast<int>(names.size()); i < j.slots(); ++i) names.push_back(j.peer_name(peer, i));
    return names;
}

namespace {

// The head of "pstrain.peer"; the UCX address follows it.
struct published {
    std::uint8_t role;  // 0: ps, 1: worker
    std::uint8_t pad[3];
    std::uint32_t index;
};

}  // namespace

std::vector<std::uint8_t> published_peer(task_id me, std::span<const std::uint8_t> address)
{
    std::vector<std::uint8_t> blob(sizeof(published) + address.size());
    const published head{
        static_cast<std::uint8_t>(me.role == role::ps ? 0 : 1), {}, static_cast<std::uint32_t>(me.index)};
    std::memcpy(blob.data(), &head, sizeof head);
    std::copy(address.begin(), address.end(), blob.begin() + sizeof head);
    return blob;
}

bool holds_peer(std::span<const std::uint8_t> blob) { return blob.size() > sizeof(published); }

step_ranks place_ranks(const job& j, const std::vector<pmix_rank>& ranks)
{
    step_ranks out;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
        const auto& blob = ranks[r].published;
        if (!holds_peer(blob)) throw error(fmt::format("rank {} published no UCX address", r));
        published p;
        std::memcpy(&p, blob.data(), sizeof p);
        const role rr = p.role == 0 ? role::ps : role::worker;
        const auto& list = j.spec.tasks(rr);
        if (p.index >= list.size())
            throw error(
                fmt::format("rank {} claims {} {} which the cluster spec does not have", r, role_name(rr), p.index));
        // PMIx's view of where the rank runs must agree with the plugin's spec.
        const auto& host = ranks[r].host;
        auto spec_host = split_host_port(list[p.index]).first;
        if (host && *host != spec_host)
            throw error(fmt::format("rank {} ({} {}) runs on {} but PSTRAIN_CLUSTER puts it on {}: the plugin's layout "
                                    "is wrong; report it with the srun line",
                                    r, role_name(rr), p.index, *host, spec_host));
        out.tasks.push_back({rr, static_cast<int>(p.index)});
        out.names.push_back(j.peer_name(rr, static_cast<int>(p.index)));
        out.addresses.push_back(std::span<const std::uint8_t>(blob).subspan(sizeof p));
        if (rr == role::worker && p.index == 0) out.chief = r;
    }
    return out;
}

namespace {

std::string separate_chief_error(const std::string& role, const char* from)
{
    return fmt::format(
        "this task is the job's {} ({}): pstrain's trainer has ps and worker tasks only, worker 0 being its "
        "chief; a separate chief and an evaluator are for TensorFlow programs run with pstrain-run: drop "
        "--chief and --evaluator for pstrain",
        role, from);
}

}  // namespace

// A static spec's key: PSTRAIN_AUTH_KEY (64 hex digits) or the first line
// of PSTRAIN_AUTH_KEY_FILE (readable by its owner only).
static std::optional<ucx::auth_key> static_key()
{
    auto hex = env("PSTRAIN_AUTH_KEY");
    const char* from = "PSTRAIN_AUTH_KEY";
    std::string text;
    if (!hex) {
        auto file = env("PSTRAIN_AUTH_KEY_FILE");
        if (!file) return std::nullopt;
        from = "PSTRAIN_AUTH_KEY_FILE";
        struct stat st {};
        if (::stat(file->c_str(), &st) != 0)
            throw error(fmt::format("PSTRAIN_AUTH_KEY_FILE={}: {}: name a file holding the job's key", *file,
                                    std::strerror(errno)));
        if (st.st_mode & (S_IRWXG | S_IRWXO))
            throw error(fmt::format("PSTRAIN_AUTH_KEY_FILE={} can be read by others (mode {:o}): chmod 600 it", *file,
                                    st.st_mode & 0777));
        std::ifstream in(*file);
        std::getline(in, text);
        hex = text;
    }
    auto key = ucx::parse_key(*hex);
    if (!key)
        throw error(fmt::format("{} must hold 64 hex digits (32 bytes), the same in every task: make one with "
                                "`openssl rand -hex 32`",
                                from));
    return key;
}

std::optional<job> detect_job(const classic_flags& o)
{
    job j;
    bool have_flags = !o.job_name.empty() || !o.ps_hosts.empty() || !o.worker_hosts.empty() || o.task_index >= 0;
    auto role_env = env("PSTRAIN_ROLE");
    bool under_pmix = env("PMIX_RANK").has_value() || env("PMIX_NAMESPACE").has_value();

    if (role_env && under_pmix && !have_flags) {
        j.how = mode::pmix;
        j.source = "PMIx and the SPANK plugin";
        if (*role_env == "chief" || *role_env == "evaluator")
            throw error(separate_chief_error(*role_env, "--chief/--evaluator"));
        if (*role_env != "ps" && *role_env != "worker")
            throw error(fmt::format("PSTRAIN_ROLE={} is not ps or worker", *role_env));
        j.num_ps = env_count("PSTRAIN_NUM_PS", 1, 1 << 16);
        j.num_workers = env_count("PSTRAIN_NUM_WORKERS", 1, 1 << 16);
        int limit = *role_env == "ps" ? j.num_ps - 1 : j.num_workers - 1;
        j.me = {*role_env == "ps" ? role::ps : role::worker, env_count("PSTRAIN_TASK_INDEX", 0, limit)};
        auto spec = env("PSTRAIN_CLUSTER");
        if (!spec) throw error("PSTRAIN_CLUSTER is not set: is spank_pstrain.so in plugstack.conf?");
        j.spec = parse_cluster_spec(*spec);
    } else if (have_flags) {
        j.how = mode::static_spec;
        j.source = "--ps-hosts/--worker-hosts";
        if (o.ps_hosts.empty() || o.worker_hosts.empty() || o.job_name.empty() || o.task_index < 0)
            throw error("the classic flags go together: give --ps-hosts, --worker-hosts, --job-name and --task-index");
        j.spec.ps = split_hosts(o.ps_hosts, "--ps-hosts");
        j.spec.worker = split_hosts(o.worker_hosts, "--worker-hosts");
        if (o.job_name != "ps" && o.job_name != "worker")
            throw error(fmt::format("--job-name {}: use ps or worker", o.job_name));
        j.me = {o.job_name == "ps" ? role::ps : role::worker, o.task_index};
        if (static_cast<std::size_t>(o.task_index) >= j.spec.tasks(j.me.role).size())
            throw error(fmt::format("--task-index {} is outside the {} {} hosts given", o.task_index,
                                    j.spec.tasks(j.me.role).size(), o.job_name));
    } else if (auto tf = env("TF_CONFIG")) {
        j.how = mode::static_spec;
        j.source = "TF_CONFIG";
        auto parsed = parse_tf_config(*tf);
        if (parsed.task.role == role::chief || parsed.task.role == role::evaluator)
            throw error(separate_chief_error(std::string(role_name(parsed.task.role)), "TF_CONFIG"));
        j.spec = parsed.cluster;
        j.me = parsed.task;
    } else {
        return std::nullopt;
    }
    if (j.how == mode::static_spec) j.key = static_key();
    j.num_ps = static_cast<int>(j.spec.ps.size());
    j.num_workers = static_cast<int>(j.spec.worker.size());
    if (j.num_ps > 0xffff || j.num_workers > 0xffff) throw error("more than 65535 ps or worker tasks");
    return j;
}

}  // namespace pstrain::bootstrap
