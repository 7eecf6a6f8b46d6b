#include "common/cluster_spec.hpp"

#include "pstrain/error.hpp"
#include "common/parse.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pstrain {

using nlohmann::json;

std::string_view role_name(role r)
{
    switch (r) {
    case role::chief: return "chief";
    case role::evaluator: return "evaluator";
    case role::ps: return "ps";
    case role::worker: return "worker";
    }
    return "?";
}

const std::vector<std::string>& cluster_spec::tasks(role r) const
{
    return r == role::chief ? chief : r == role::evaluator ? evaluator : r == role::ps ? ps : worker;
}

std::vector<std::string>& cluster_spec::tasks(role r)
{
    return const_cast<std::vector<std::string>&>(static_cast<const cluster_spec&>(*this).tasks(r));
}

namespace {

json cluster_json(const cluster_spec& spec, bool with_evaluator)
{
    json j = json::object();
    if (!spec.chief.empty()) j["chief"] = spec.chief;
    if (with_evaluator && !spec.evaluator.empty()) j["evaluator"] = spec.evaluator;
    j["ps"] = spec.ps;
    j["worker"] = spec.worker;
    return j;
}

// A list that may be absent (chief, evaluator): at most `most` entries.
std::vector<std::string> address_list(const json& cluster, const char* key, std::string_view what,
                                      bool optional = false, std::size_t most = 0);

std::vector<std::string> optional_list(const json& cluster, const char* key, std::string_view what)
{
    return cluster.contains(key) ? address_list(cluster, key, what, true, 1) : std::vector<std::string>{};
}

std::vector<std::string> address_list(const json& cluster, const char* key, std::string_view what, bool optional,
                                      std::size_t most)
{
    auto it = cluster.find(key);
    if (optional && most > 0 && it != cluster.end() && it->is_array() && it->size() > most)
        throw error(fmt::format("{}: \"{}\" lists {} tasks: a job has at most {}", what, key, it->size(), most));
    if (it == cluster.end() || !it->is_array() || it->empty())
        throw error(fmt::format("{}: \"{}\" must be a non-empty list of \"host:port\" strings", what, key));
    std::vector<std::string> out;
    for (const auto& a : *it) {
        if (!a.is_string()) throw error(fmt::format("{}: \"{}\" holds a non-string entry", what, key));
        auto address = a.get<std::string>();
        try {
            split_host_port(address);
        } catch (const error& e) {
            throw error(fmt::format("{}: {}", what, e.what()));
        }
        out.push_back(std::move(address));
    }
    return out;
}

json parse_object(std::string_view text, std::string_view what)
{
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw error(fmt::format("{} is not a JSON object: check its value", what));
    return j;
}

}  // namespace

std::pair<std::string, int> split_host_port(std::string_view address)
{
    auto colon = address.rfind(':');
    if (colon == std::string_view::npos || colon == 0)
        throw error(fmt::format("address '{}' is not host:port", address));
    auto port = parse_count(address.substr(colon + 1), 1, 65535);
    if (!port) throw error(fmt::format("address '{}' has no valid port (1-65535)", address));
    return {std::string(address.substr(0, colon)), static_cast<int>(*port)};
}

std::string to_json(const cluster_spec& spec) { return cluster_json(spec, true).dump(); }

std::string tf_config_json(const cluster_spec& spec, task_id task)
{
    json j{{"cluster", cluster_json(spec, false)},
           {"task", {{"type", std::string(role_name(task.role))}, {"index", task.index}}},
           {"rpc_layer", "grpc"},
           {"environment", "cloud"}};
    return j.dump();
}

namespace {

cluster_spec cluster_of(const json& j, std::string_view what)
{
    cluster_spec spec;
    spec.chief = optional_list(j, "chief", what);
    spec.evaluator = optional_list(j, "evaluator", what);
    spec.ps = address_list(j, "ps", what);
    spec.worker = address_list(j, "worker", what);
    return spec;
}

}  // namespace

cluster_spec parse_cluster_spec(std::string_view text, std::string_view what)
{
    return cluster_of(parse_object(text, what), what);
}

tf_config parse_tf_config(std::string_view text)
{
    json j = parse_object(text, "TF_CONFIG");
    auto cluster = j.find("cluster");
    if (cluster == j.end() || !cluster->is_object())
        throw error("TF_CONFIG has no \"cluster\" object: set it as {\"cluster\":{...},\"task\":{...}}");
    tf_config out;
    out.cluster = cluster_of(*cluster, "TF_CONFIG");
    auto task = j.find("task");
    if (task == j.end() || !task->is_object() || !task->contains("type") || !task->contains("index") ||
        !(*task)["type"].is_string() || !(*task)["index"].is_number_integer())
        throw error("TF_CONFIG has no valid \"task\": set it as {\"type\":\"ps\"|\"worker\",\"index\":N}");
    auto type = (*task)["type"].get<std::string>();
    int index = (*task)["index"].get<int>();
    if (type == "ps") {
        out.task = {role::ps, index};
    } else if (type == "worker") {
        out.task = {role::worker, index};
    } else if (type == "chief") {
        out.task = {role::chief, index};
    } else if (type == "evaluator") {
        // Outside the cluster, as TensorFlow wants it: its index is its own.
        if (index != 0)
            throw error(fmt::format("TF_CONFIG task index {} for the evaluator: there is one, index 0", index));
        out.task = {role::evaluator, 0};
        return out;
    } else {
        throw error(fmt::format("TF_CONFIG task type '{}' is not chief, evaluator, ps or worker", type));
    }
    if (index < 0 || static_cast<std::size_t>(index) >= out.cluster.tasks(out.task.role).size())
        throw error(fmt::format("TF_CONFIG task index {} is outside the {} list ({} entries)", index, type,
                                out.cluster.tasks(out.task.role).size()));
    return out;
}

}  // namespace pstrain
