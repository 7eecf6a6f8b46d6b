// logistic_regression: a program of its own on pstrain's parameter-server
// library, written only against the installed API (<pstrain/ps.hpp>).
//
// The model is binary logistic regression, p(y=1|x) = sigmoid(w.x + b), on a
// synthetic data set the program generates itself from --seed: FEATURES
// standard-normal features, labels from known true weights plus a little
// label noise (linearly separable-ish; the true weights classify about 96%
// of examples right).  The parameters are one flat vector of FEATURES+1
// floats, two tensors to the library: the weights, then the bias.
//
//   * A PS task runs ps::server with plain SGD; its step_completed hook ends
//     training at --steps global steps.
//   * Every worker trains on its own share of the training set (example j
//     belongs to worker j mod M): it computes a mini-batch gradient into the
//     client's grads() and pushes it; the reply brings the new values into
//     params().  Sync (default): the PS averages one gradient per worker
//     per step.  --async: each gradient is applied on arrival.
//   * Worker 0, the chief, initialises the parameters, evaluates accuracy on
//     a held-out set at the end, ends training (chief_client::shutdown) and prints
//     one JSON line on stdout:
//       {"event":"done","accuracy":0.9655,"steps":300,"mode":"sync",...}
//     It exits 0 only when the accuracy is at least --min-accuracy (default
//     0.90); a PS task or another worker exits 0 when training ends normally.
//
// Run it:
//   srun --mpi=pmix -n3 --ps=1 --workers=2 logistic_regression   # under Slurm with pstrain's SPANK plugin
//   logistic_regression --standalone [--workers 2]                # anywhere: PS and workers are threads of one
//                                                                 # process, over the loopback transport
// Build it against an installed pstrain:
//   c++ -std=c++20 -O2 -pthread logistic_regression.cpp $(pkg-config --cflags --libs pstrain-ps) -o logistic_regression
#include <pstrain/ps.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace ps = pstrain::ps;

namespace {

// ------------------------------------------------------------ options

struct options {
    bool standalone = false;
    int workers = 2;            // --standalone only: worker threads
    std::uint64_t steps = 300;  // global steps
    int features = 20;
    int train_examples = 8000, test_examples = 2000;
    int batch = 32;
    float learning_rate = 0.5f;
    bool async = false;
    std::uint64_t seed = 1;
    double min_accuracy = 0.90;
};

[[noreturn]] void usage_error(const std::string& what)
{
    std::fprintf(stderr,
                 "logistic_regression: error: %s\n"
                 "usage: logistic_regression [--standalone [--workers M]] [--steps N] [--features D] [--batch B]\n"
                 "         [--learning-rate LR] [--async] [--seed S] [--min-accuracy A]\n",
                 what.c_str());
    std::exit(2);
}

options parse_options(int argc, char** argv)
{
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage_error(a + " needs a value");
            return argv[++i];
        };
        auto number = [&](double lo, double hi) {
            const std::string v = value();
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x >= lo && x <= hi))
                usage_error(a + " " + v + ": give a number from " + std::to_string(lo) + " to " + std::to_string(hi));
            return x;
        };
        if (a == "--standalone") o.standalone = true;
        else if (a == "--async") o.async = true;
        else if (a == "--workers") o.workers = static_cast<int>(number(1, 64));
        else if (a == "--steps") o.steps = static_cast<std::uint64_t>(number(1, 1e9));
        else if (a == "--features") o.features = static_cast<int>(number(1, 1e6));
        else if (a == "--batch") o.batch = static_cast<int>(number(1, 1e6));
        else if (a == "--learning-rate") o.learning_rate = static_cast<float>(number(1e-9, 1e3));
        else if (a == "--seed") o.seed = static_cast<std::uint64_t>(number(0, 1e18));
        else if (a == "--min-accuracy") o.min_accuracy = number(0, 1);
        else if (a == "--help" || a == "-h") usage_error("help requested");
        else usage_error("unknown argument " + a);
    }
    return o;
}

// --------------------------------------------------------------- data
//
// Counter-based: example j of a set is a pure function of (seed, set, j),
// so a worker generates only its own share, every task agrees on every
// example, and the numbers are the same with any C++ standard library.

std::uint64_t splitmix64(std::uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

class rng {
public:
    explicit rng(std::uint64_t seed) : s_(splitmix64(seed)) {}
    std::uint64_t next() { return splitmix64(s_++); }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
    double normal()                                                             // Box-Muller
    {
        const double u = 1.0 - uniform(), v = uniform();
        return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
    }

private:
    std::uint64_t s_;
};

enum class set_id : std::uint64_t { truth = 1, train = 2, test = 3 };

std::uint64_t stream(std::uint64_t seed, set_id set, std::uint64_t j)
{
    return splitmix64(splitmix64(seed ^ (static_cast<std::uint64_t>(set) << 56)) + j);
}

struct problem {
    int d = 0;
    std::vector<float> true_w;  // d weights, then the bias
};

problem make_problem(const options& o)
{
    problem p;
    p.d = o.features;
    rng r(stream(o.seed, set_id::truth, 0));
    for (int k = 0; k <= p.d; ++k) p.true_w.push_back(static_cast<float>(k < p.d ? r.normal() : 0.5 * r.normal()));
    return p;
}

// Examples as rows of d features, and 0/1 labels.
struct examples {
    std::vector<float> x;
    std::vector<float> y;
    std::size_t size() const { return y.size(); }
};

void add_example(const problem& p, std::uint64_t seed, set_id set, std::uint64_t j, examples& out)
{
    rng r(stream(seed, set, j));
    double z = p.true_w[static_cast<std::size_t>(p.d)];
    for (int k = 0; k < p.d; ++k) {
        const auto v = static_cast<float>(r.normal());
        out.x.push_back(v);
        z += static_cast<double>(v) * p.true_w[static_cast<std::size_t>(k)];
    }
    z += 0.5 * r.normal();  // label noise: separable-ish
    out.y.push_back(z > 0 ? 1.0f : 0.0f);
}

// Worker `index` of `workers`: examples j with j mod workers == index.
examples make_share(const problem& p, const options& o, int index, int workers)
{
    examples e;
    for (int j = index; j < o.train_examples; j += workers)
        add_example(p, o.seed, set_id::train, static_cast<std::uint64_t>(j), e);
    return e;
}

examples make_test_set(const problem& p, const options& o)
{
    examples e;
    for (int j = 0; j < o.test_examples; ++j) add_example(p, o.seed, set_id::test, static_cast<std::uint64_t>(j), e);
    return e;
}

// -------------------------------------------------------------- model

float sigmoid(double z) { return static_cast<float>(1.0 / (1.0 + std::exp(-z))); }

double logit(std::span<const float> w, const float* x, int d)
{
    double z = w[static_cast<std::size_t>(d)];
    for (int k = 0; k < d; ++k) z += static_cast<double>(w[static_cast<std::size_t>(k)]) * x[k];
    return z;
}

// The mean log-loss gradient of a mini-batch into `grad`; returns the loss.
double gradient(std::span<const float> w, const examples& data, std::span<const std::size_t> rows, int d,
                std::span<float> grad)
{
    std::fill(grad.begin(), grad.end(), 0.0f);
    double loss = 0;
    const double scale = 1.0 / static_cast<double>(rows.size());
    for (std::size_t i : rows) {
        const float* x = &data.x[i * static_cast<std::size_t>(d)];
        const double z = logit(w, x, d);
        const float pr = sigmoid(z), y = data.y[i];
        loss += std::log1p(std::exp(-std::abs(z))) + std::max(z, 0.0) - y * z;  // stable log-loss
        const auto err = static_cast<float>((pr - y) * scale);
        for (int k = 0; k < d; ++k) grad[static_cast<std::size_t>(k)] += err * x[k];
        grad[static_cast<std::size_t>(d)] += err;
    }
    return loss * scale;
}

double accuracy(std::span<const float> w, const examples& data, int d)
{
    std::size_t right = 0;
    for (std::size_t i = 0; i < data.size(); ++i)
        right += (logit(w, &data.x[i * static_cast<std::size_t>(d)], d) > 0) == (data.y[i] > 0.5f);
    return static_cast<double>(right) / static_cast<double>(data.size());
}

double cosine(std::span<const float> a, std::span<const float> b)
{
    double ab = 0, aa = 0, bb = 0;
    for (std::size_t k = 0; k < a.size(); ++k) ab += a[k] * b[k], aa += a[k] * a[k], bb += b[k] * b[k];
    return ab / std::sqrt(aa * bb + 1e-30);
}

// ------------------------------------------------------------ the tasks

ps::server_config server_config_for(const options& o, int index, int num_ps)
{
    ps::server_config c;
    c.index = index;
    c.num_ps = num_ps;
    c.training.optimizer.kind = ps::optimizer_kind::sgd;
    c.training.optimizer.learning_rate = o.learning_rate;
    c.training.sync = !o.async;
    c.training.replicas_to_aggregate = 0;  // sync: one gradient from every worker per step
    return c;
}

// A PS task: serves its shard until the chief ends training.
void run_ps(const options& o, ps::transport& net, int index, int num_ps)
{
    ps::server_hooks hooks;
    const std::uint64_t steps = o.steps;
    hooks.step_completed = [steps](std::uint64_t step) { return step >= steps; };
    ps::server server(net, server_config_for(o, index, num_ps), hooks);
    server.run();
    if (server.stale_gradients() > 0)
        std::fprintf(stderr, "logistic_regression[ps %d]: %llu stale gradients dropped\n", index,
                     static_cast<unsigned long long>(server.stale_gradients()));
}

// Trains on `share` until a reply says training is done; returns the last
// batch's loss.
double train(const options& o, ps::client& client, const examples& share, int d, int index)
{
    rng batches(stream(o.seed, set_id::train, 1000003ULL * static_cast<std::uint64_t>(index + 1)));
    std::vector<std::size_t> rows(static_cast<std::size_t>(o.batch));
    std::uint64_t local_steps = 0, next_report = 100;
    double loss = 0;
    while (!client.done()) {
        for (auto& r : rows) r = static_cast<std::size_t>(batches.next() % share.size());
        loss = gradient(client.params(), share, rows, d, client.grads());
        client.step(++local_steps);  // push, and wait for the new values
        if (index == 0 && client.global_step() >= next_report) {
            std::fprintf(stderr, "logistic_regression[worker 0]: step %llu, batch loss %.4f\n",
                         static_cast<unsigned long long>(client.global_step()), loss);
            next_report += 100;
        }
    }
    return loss;
}

// A worker: pulls the values the chief initialised, then trains.  The
// chief (worker 0) has a chief_client: it initialises first, and after
// training evaluates, ends training and reports last.  Returns the exit
// status.
int run_worker(const options& o, ps::transport& net, int index, int num_ps, int num_workers,
               std::vector<std::string> worker_names)
{
    const problem p = make_problem(o);
    const int d = p.d;
    const examples share = make_share(p, o, index, num_workers);
    if (share.size() == 0)
        throw pstrain::error("worker " + std::to_string(index) + " has no training examples: use fewer than " +
                             std::to_string(o.train_examples) + " workers");

    ps::client_config cc;
    cc.index = index;
    cc.num_workers = num_workers;
    cc.num_params = static_cast<std::uint64_t>(d) + 1;
    cc.tensor_sizes = {static_cast<std::uint64_t>(d), 1};  // tensor 0: the weights, tensor 1: the bias
    cc.worker_names = std::move(worker_names);
    // Between a call and its wait() the buffers belong to the library.
    if (index != 0) {
        ps::client client(net, cc);
        client.wait(client.async_pull());
        train(o, client, share, d, index);
        return 0;
    }

    ps::chief_client client(net, cc);
    std::fill(client.params().begin(), client.params().end(), 0.0f);  // zeros: logistic regression is convex
    client.wait(client.async_init());
    const double loss = train(o, client, share, d, index);

    const examples test = make_test_set(p, o);
    const std::span<const float> w = client.params();
    const double acc = accuracy(w, test, d),
                 cos = cosine(w.first(static_cast<std::size_t>(d)),
                              std::span<const float>(p.true_w).first(static_cast<std::size_t>(d)));
    const double true_acc = accuracy(p.true_w, test, d);
    const std::uint64_t steps = client.global_step();
    client.shutdown();  // every PS ends and exits
    std::printf("{\"event\":\"done\",\"accuracy\":%.4f,\"steps\":%llu,\"mode\":\"%s\",\"ps\":%d,\"workers\":%d,"
                "\"loss\":%.4f,\"cosine_to_true_weights\":%.4f,\"true_weights_accuracy\":%.4f,\"min_accuracy\":%.4f}\n",
                acc, static_cast<unsigned long long>(steps), o.async ? "async" : "sync", num_ps, num_workers, loss, cos,
                true_acc, o.min_accuracy);
    std::fflush(stdout);
    if (acc < o.min_accuracy) {
        std::fprintf(stderr, "logistic_regression[worker 0]: error: test accuracy %.4f is below --min-accuracy %.4f\n",
                     acc, o.min_accuracy);
        return 1;
    }
    return 0;
}

// --standalone: one PS thread, o.workers worker threads, the loopback
// between them.
int run_standalone(const options& o)
{
    const int workers = o.workers;
    ps::loopback_network net(1, workers);
    std::exception_ptr ps_error;
    std::thread ps_thread([&] {
        try {
            run_ps(o, net.ps(0), 0, 1);
        } catch (...) {
            ps_error = std::current_exception();
        }
    });
    std::vector<int> status(static_cast<std::size_t>(workers), 1);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(workers));
    std::vector<std::thread> threads;
    for (int i = 0; i < workers; ++i)
        threads.emplace_back([&, i] {
            const auto k = static_cast<std::size_t>(i);
            try {
                status[k] = run_worker(o, net.worker(i), i, 1, workers, {});
            } catch (...) {
                errors[k] = std::current_exception();
                net.kill_worker(i);  // the PS sees it gone and does not wait for it
            }
        });
    for (auto& t : threads) t.join();
    ps_thread.join();
    // The first error is the one that matters (the others follow from it).
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    if (ps_error) std::rethrow_exception(ps_error);
    return status[0];
}

int run_distributed(const options& o)
{
    ps::bootstrap_options bo;
    auto task = ps::connect_task(bo);
    if (!task) {
        std::fprintf(stderr, "logistic_regression: error: no parameter-server job here: run it with "
                             "srun --mpi=pmix --ps=N --workers=M (pstrain's SPANK plugin), or try --standalone\n");
        return 2;
    }
    const ps::task_info& me = task->me;
    int code = 1;
    try {
        if (me.is_ps) {
            run_ps(o, *task->net, me.index, me.num_ps);
            code = 0;
        } else {
            code = run_worker(o, *task->net, me.index, me.num_ps, me.num_workers, task->worker_names);
        }
    } catch (...) {
        task->net->close(true);  // drop what is queued for peers that are gone
        throw;
    }
    task->net->close(code != 0);
    return code;
}

}  // namespace

int main(int argc, char** argv)
{
    const options o = parse_options(argc, argv);
    try {
        return o.standalone ? run_standalone(o) : run_distributed(o);
    } catch (const pstrain::peer_error& e) {
        std::fprintf(stderr, "logistic_regression: error: %s (peer: %s)\n", e.what(), e.peer().c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "logistic_regression: error: %s\n", e.what());
    }
    return 1;
}
