// The trainer's command line: each flag's value lands in its field, absent
// flags keep their defaults, and each bad value is one clear line.
#define BOOST_TEST_DYN_LINK
#define BOOST_TEST_MODULE options
#include <boost/test/unit_test.hpp>

#include "config.h"
#include "trainer/app/options.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

using pstrain::trainer::model_family;
using pstrain::trainer::parse_command_line;
using pstrain::trainer::train_options;
using pstrain::trainer::ucx_progress;

namespace {

// Parses; returns what was written to stderr, sets the options (none when
// the program should exit) and the exit code.
std::string parse(std::vector<std::string> args, std::optional<train_options>& options, int& code)
{
    args.insert(args.begin(), "pstrain");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    char path[] = "/tmp/pstrain-opt-XXXXXX";
    int fd = mkstemp(path);
    int saved = dup(2);
    dup2(fd, 2);
    code = -1;
    options = parse_command_line(static_cast<int>(argv.size()), argv.data(), code);
    dup2(saved, 2);
    close(saved);
    std::string out;
    char buf[4096];
    lseek(fd, 0, SEEK_SET);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
    close(fd);
    unlink(path);
    return out;
}

// The options of a command line that must be accepted silently.
train_options accepted(std::vector<std::string> args)
{
    std::optional<train_options> o;
    int code = 0;
    auto err = parse(args, o, code);
    BOOST_TEST_REQUIRE(o.has_value(), "rejected, stderr: " << err);
    BOOST_TEST(err.empty(), "stderr: " << err);
    return *o;
}

void expect_error(std::vector<std::string> args, const std::string& part)
{
    std::optional<train_options> o;
    int code = 0;
    auto err = parse(args, o, code);
    BOOST_TEST(!o.has_value());
    BOOST_TEST(code == 2);
    BOOST_TEST(err.find(part) != std::string::npos, "stderr: " << err);
    BOOST_TEST(std::count(err.begin(), err.end(), '\n') == 1, "one line: " << err);
}

}  // namespace

BOOST_AUTO_TEST_CASE(defaults_when_no_flag_is_given)
{
    const auto o = accepted({});
    BOOST_TEST(!o.standalone);
    BOOST_TEST(!o.sync_replicas);
    BOOST_TEST(o.replicas_to_aggregate == 0);
    BOOST_TEST(o.ps_hosts.empty());
    BOOST_TEST(o.worker_hosts.empty());
    BOOST_TEST(o.job_name.empty());
    BOOST_TEST(o.task_index == -1);
    BOOST_TEST(o.bootstrap_timeout == 60);
    BOOST_TEST(o.peer_timeout == 600);
    BOOST_TEST((o.progress == ucx_progress::event));
    BOOST_TEST(o.shared_memory);
    BOOST_TEST(o.data_dir == PSTRAIN_DEFAULT_DATA_DIR);
    BOOST_TEST(!o.sample_with_replacement);
    BOOST_TEST(o.model == "mlp");
    BOOST_TEST(o.hidden_units == "100");
    BOOST_TEST(o.hidden == std::vector<int>{100}, boost::test_tools::per_element());
    BOOST_TEST(o.train_steps == 1000);
    BOOST_TEST(o.batch_size == 100);
    BOOST_TEST((o.optimizer == pstrain::ps::optimizer_kind::sgd));
    BOOST_TEST(o.learning_rate == 0.01f);
    BOOST_TEST(o.seed == 1u);
    BOOST_TEST(o.eval_every == 0);
    BOOST_TEST(o.checkpoint_dir.empty());
    BOOST_TEST(o.save_checkpoint_secs == 600);
    BOOST_TEST(o.save_checkpoint_steps == 0);
    BOOST_TEST(o.keep_checkpoints == 5);
    BOOST_TEST((o.device == pstrain::compute::device_kind::automatic));
    BOOST_TEST(o.threads == 0);
    BOOST_TEST(o.log_every == 100);
    BOOST_TEST(o.metrics_file.empty());
    BOOST_TEST(o.log_level == "info");
}

BOOST_AUTO_TEST_CASE(every_accepted_flag_lands_in_its_field)
{
    // Each value differs from the default, so a flag that is parsed into the
    // wrong field, or dropped, fails here.
    const auto o = accepted({"--standalone",
                             "--sync-replicas",
                             "--replicas-to-aggregate",
                             "3",
                             "--ps-hosts",
                             "a:1,b:2",
                             "--worker-hosts",
                             "c:3",
                             "--job-name",
                             "worker",
                             "--task-index",
                             "4",
                             "--bootstrap-timeout",
                             "30",
                             "--peer-timeout",
                             "45",
                             "--progress",
                             "spin",
                             "--shared-memory",
                             "off",
                             "--data-dir",
                             "/data/x",
                             "--sample-with-replacement",
                             "--model",
                             "mlp",
                             "--hidden-units",
                             "256,128",
                             "--train-steps",
                             "6000",
                             "--batch-size",
                             "50",
                             "--optimizer",
                             "adam",
                             "--learning-rate",
                             "0.001",
                             "--seed",
                             "7",
                             "--eval-every",
                             "3000",
                             "--checkpoint-dir",
                             "/ckpt",
                             "--save-checkpoint-secs",
                             "0",
                             "--save-checkpoint-steps",
                             "100",
                             "--keep-checkpoints",
                             "2",
                             "--device",
                             "cpu",
                             "--threads",
                             "3",
                             "--log-every",
                             "10",
                             "--metrics-file",
                             "m.jsonl",
                             "--log-level",
                             "debug"});
    BOOST_TEST(o.standalone);
    BOOST_TEST(o.sync_replicas);
    BOOST_TEST(o.replicas_to_aggregate == 3);
    BOOST_TEST(o.ps_hosts == "a:1,b:2");
    BOOST_TEST(o.worker_hosts == "c:3");
    BOOST_TEST(o.job_name == "worker");
    BOOST_TEST(o.task_index == 4);
    BOOST_TEST(o.bootstrap_timeout == 30);
    BOOST_TEST(o.peer_timeout == 45);
    BOOST_TEST((o.progress == ucx_progress::spin));
    BOOST_TEST(!o.shared_memory);
    BOOST_TEST(o.data_dir == "/data/x");
    BOOST_TEST(o.sample_with_replacement);
    BOOST_TEST(o.model == "mlp");
    BOOST_TEST(o.hidden_units == "256,128");
    BOOST_TEST(o.hidden == (std::vector<int>{256, 128}), boost::test_tools::per_element());
    BOOST_TEST(o.train_steps == 6000);
    BOOST_TEST(o.batch_size == 50);
    BOOST_TEST((o.optimizer == pstrain::ps::optimizer_kind::adam));
    BOOST_TEST(o.learning_rate == 0.001f);
    BOOST_TEST(o.seed == 7u);
    BOOST_TEST(o.eval_every == 3000);
    BOOST_TEST(o.checkpoint_dir == "/ckpt");
    BOOST_TEST(o.save_checkpoint_secs == 0);
    BOOST_TEST(o.save_checkpoint_steps == 100);
    BOOST_TEST(o.keep_checkpoints == 2);
    BOOST_TEST((o.device == pstrain::compute::device_kind::cpu));
    BOOST_TEST(o.threads == 3);
    BOOST_TEST(o.log_every == 10);
    BOOST_TEST(o.metrics_file == "m.jsonl");
    BOOST_TEST(o.log_level == "debug");
}

BOOST_AUTO_TEST_CASE(the_classic_examples_underscore_spellings_and_equals_signs)
{
    const auto o =
        accepted({"--sync_replicas", "--replicas_to_aggregate=2", "--ps_hosts=h:1", "--worker_hosts", "h:2,h:3",
                  "--job_name", "ps", "--task_index", "0", "--checkpoint_dir=/c", "--batch-size=64"});
    BOOST_TEST(o.sync_replicas);
    BOOST_TEST(o.replicas_to_aggregate == 2);
    BOOST_TEST(o.ps_hosts == "h:1");
    BOOST_TEST(o.worker_hosts == "h:2,h:3");
    BOOST_TEST(o.job_name == "ps");
    BOOST_TEST(o.task_index == 0);
    BOOST_TEST(o.checkpoint_dir == "/c");
    BOOST_TEST(o.batch_size == 64);
}

BOOST_AUTO_TEST_CASE(the_linear_model_has_no_hidden_layers)
{
    const auto o = accepted({"--model", "linear", "--hidden-units", "64"});
    BOOST_TEST(o.model == "linear");
    BOOST_TEST((o.family == model_family::linear));
    BOOST_TEST(o.hidden.empty());
}

BOOST_AUTO_TEST_CASE(batch_size_zero) { expect_error({"--batch-size", "0"}, "--batch-size"); }
BOOST_AUTO_TEST_CASE(negative_learning_rate) { expect_error({"--learning-rate", "-1"}, "--learning-rate"); }
BOOST_AUTO_TEST_CASE(empty_hidden_layer)
{
    expect_error({"--hidden-units", "10,,5"}, "--hidden-units 10,,5: '' is not a layer width");
}
BOOST_AUTO_TEST_CASE(text_train_steps) { expect_error({"--train-steps", "abc"}, "--train-steps"); }
BOOST_AUTO_TEST_CASE(unknown_flag) { expect_error({"--frobnicate"}, "--frobnicate"); }
BOOST_AUTO_TEST_CASE(unknown_optimizer) { expect_error({"--optimizer", "rmsprop"}, "rmsprop"); }
BOOST_AUTO_TEST_CASE(errors_say_where_help_is) { expect_error({"--batch-size", "x"}, "see pstrain --help"); }
BOOST_AUTO_TEST_CASE(keep_no_checkpoint)
{
    expect_error({"--keep-checkpoints", "0"}, "--keep-checkpoints: Value 0 not in range 1 to 1000000");
}
BOOST_AUTO_TEST_CASE(full_checkpoint_every_defaults_to_10_and_is_at_least_1)
{
    BOOST_TEST(accepted({}).full_checkpoint_every == 10);
    BOOST_TEST(accepted({"--full-checkpoint-every", "1"}).full_checkpoint_every == 1);
    expect_error({"--full-checkpoint-every", "0"}, "--full-checkpoint-every: Value 0 not in range 1 to 1000000");
}
BOOST_AUTO_TEST_CASE(negative_checkpoint_interval)
{
    expect_error({"--save-checkpoint-secs", "-5"}, "--save-checkpoint-secs");
}
BOOST_AUTO_TEST_CASE(text_checkpoint_steps)
{
    expect_error({"--save-checkpoint-steps", "often"}, "--save-checkpoint-steps");
}
BOOST_AUTO_TEST_CASE(shared_memory_yes)
{
    expect_error({"--shared-memory", "yes"}, "--shared-memory: yes not in {auto,off}");
}

BOOST_AUTO_TEST_CASE(a_flag_given_twice_takes_the_last_value)
{
    // train.sh passes its defaults first, the user's flags after them.
    std::optional<train_options> o;
    int code = 0;
    const auto err = parse(
        {"--data-dir", "/script/default", "--train-steps", "10", "--data-dir", "/users/own", "--train-steps", "20"}, o,
        code);
    BOOST_TEST_REQUIRE(o.has_value(), err);
    BOOST_TEST(o->data_dir == "/users/own");
    BOOST_TEST(o->train_steps == 20);
}

BOOST_AUTO_TEST_CASE(an_unknown_flag_is_named_alone)
{
    std::optional<train_options> o;
    int code = 0;
    const auto err = parse({"--frobnicate", "3"}, o, code);
    BOOST_TEST(!o.has_value());
    BOOST_TEST(code == 2);
    BOOST_TEST(err.find("unknown argument '--frobnicate': see pstrain --help") != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(a_mistyped_flag_gets_did_you_mean)
{
    std::optional<train_options> o;
    int code = 0;
    auto err = parse({"--batch-szie", "64"}, o, code);
    BOOST_TEST(!o.has_value());
    BOOST_TEST(code == 2);
    BOOST_TEST(err ==
                   "pstrain: error: unknown argument '--batch-szie': did you mean --batch-size? (see pstrain --help)\n",
               err);
    err = parse({"--learning_rate=0.1"}, o, code);
    BOOST_TEST(err.find("did you mean --learning-rate?") != std::string::npos, err);
    err = parse({"--chekpoint-dir", "/tmp/x"}, o, code);
    BOOST_TEST(err.find("did you mean --checkpoint-dir?") != std::string::npos, err);
    err = parse({"--sync"}, o, code);  // a prefix far from any whole name: no guess
    BOOST_TEST(err.find("did you mean") == std::string::npos, err);
    BOOST_TEST(code == 2);
}

BOOST_AUTO_TEST_CASE(model_presets_and_layer_specs)
{
    BOOST_TEST(!accepted({}).layers, "the default is the mlp preset, on its own code");
    const auto cnn = accepted({"--model", "cnn"});
    BOOST_TEST(cnn.layers);
    BOOST_TEST(cnn.spec.layers.size() == 8u);
    const auto spec = accepted({"--model", "conv2d:8:3x3:relu,maxpool:2,flatten,dense:10", "--summary"});
    BOOST_TEST(spec.layers);
    BOOST_TEST(spec.summary);
    BOOST_TEST(spec.spec.text() == "conv2d:8:3x3:relu,maxpool:2,flatten,dense:10");
    const auto aug = accepted({"--augment-shift", "2", "--augment-flip", "--normalize", "per-channel"});
    BOOST_TEST(aug.augment_shift == 2);
    BOOST_TEST(aug.augment_flip);
    BOOST_TEST((aug.normalize == pstrain::data::normalization::per_channel));
    const auto plain = accepted({});
    BOOST_TEST(plain.augment_shift == 0, "augmentation is off by default");
    BOOST_TEST(!plain.augment_flip);
    BOOST_TEST((plain.normalize == pstrain::data::normalization::global));
}

BOOST_AUTO_TEST_CASE(a_bad_layer_is_one_line_naming_it)
{
    expect_error({"--model", "conv2d:32:5x5,maxpol:2,dense:10"},
                 "pstrain: error: --model: layer 2 'maxpol:2': no layer 'maxpol': accepted: input, dense, conv2d");
}

BOOST_AUTO_TEST_CASE(model_files)
{
    char path[] = "/tmp/pstrain-model-XXXXXX";
    int fd = mkstemp(path);
    const std::string json = R"({"layers":["conv2d:4:3x3:relu",{"type":"dense","units":10}]})";
    BOOST_TEST_REQUIRE(write(fd, json.data(), json.size()) == static_cast<ssize_t>(json.size()));
    close(fd);
    const auto o = accepted({"--model-file", path});
    BOOST_TEST(o.layers);
    BOOST_TEST(o.spec.text() == "conv2d:4:3x3:relu,dense:10");
    expect_error({"--model-file", path, "--model", "cnn"}, "--model excludes --model-file");
    unlink(path);
    expect_error({"--model-file", "/nonexistent/m.json"},
                 "--model-file /nonexistent/m.json: cannot open: No such file or directory");
}

// Layer models go to a GPU where the build has cuDNN; a CUDA build without
// it refuses --device cuda before reading data and keeps --device auto on
// the CPU.
BOOST_AUTO_TEST_CASE(cuda_takes_layer_models_where_cudnn_is_built)
{
#if defined(HAVE_CUDA) && !defined(HAVE_CUDNN)
    expect_error(
        {"--model", "cnn", "--device", "cuda"},
        "--device cuda: --model cnn needs cuDNN, and this pstrain was built without it: install cuDNN beside the CUDA "
        "toolkit and rebuild, or use --device cpu");
    BOOST_TEST((accepted({"--model", "cnn"}).device == pstrain::compute::device_kind::cpu));
#elif defined(HAVE_CUDNN)
    BOOST_TEST((accepted({"--model", "cnn", "--device", "cuda"}).device == pstrain::compute::device_kind::cuda));
    BOOST_TEST(accepted({"--model", "dense:10", "--device", "cuda"}).layers);
    BOOST_TEST((accepted({"--model", "cnn"}).device == pstrain::compute::device_kind::automatic),
               "auto: the GPU when one is visible");
#endif
    BOOST_TEST(accepted({"--model", "cnn", "--device", "cuda", "--summary"}).summary, "--summary needs no device");
}

BOOST_AUTO_TEST_CASE(augment_shift_out_of_range) { expect_error({"--augment-shift", "65"}, "--augment-shift"); }
BOOST_AUTO_TEST_CASE(unknown_normalisation)
{
    expect_error({"--normalize", "minmax"}, "--normalize: minmax not in {global,per-channel}");
}

// A folder of .tsv files is click-through data: DeepFM unless another
// model is named; its own defaults and flags.
BOOST_AUTO_TEST_CASE(tsv_data_trains_wide_deep)
{
    char dir[] = "/tmp/pstrain-ctr-XXXXXX";
    BOOST_TEST_REQUIRE(mkdtemp(dir) != nullptr);
    const std::string tsv = std::string(dir) + "/train-00000.tsv";
    close(open(tsv.c_str(), O_CREAT | O_WRONLY, 0600));
    auto o = accepted({"--data-dir", dir});
    BOOST_TEST(o.ctr);
    BOOST_TEST(o.model == "deepfm");
    BOOST_TEST((o.family == model_family::deepfm));
    BOOST_TEST(o.hidden == (std::vector<int>{128, 64}), boost::test_tools::per_element());
    BOOST_TEST(o.embedding_dim == 16);
    BOOST_TEST(o.embedding_optimizer == "adagrad");
    BOOST_TEST(o.max_table_rows == 0u);
    o = accepted({"--data-dir", dir, "--hidden-units", "32", "--embedding-dim", "8", "--embedding-combiner", "mean",
                  "--embedding-optimizer", "ftrl", "--admit-after", "3", "--evict-after", "1000", "--max-table-rows",
                  "5000", "--skip-bad-lines"});
    BOOST_TEST(o.hidden == (std::vector<int>{32}), boost::test_tools::per_element());
    BOOST_TEST(o.embedding_dim == 8);
    BOOST_TEST(o.embedding_combiner == "mean");
    BOOST_TEST(o.embedding_optimizer == "ftrl");
    BOOST_TEST(o.admit_after == 3u);
    BOOST_TEST(o.evict_after == 1000u);
    BOOST_TEST(o.max_table_rows == 5000u);
    BOOST_TEST(o.skip_bad_lines);
    // A model named is the model trained; an image folder stays mlp.
    BOOST_TEST(!accepted({"--data-dir", dir, "--model", "mlp"}).ctr);
    BOOST_TEST(!accepted({"--data-dir", "/nonexistent"}).ctr);
    BOOST_TEST(accepted({"--model", "wide-deep"}).ctr);
    BOOST_TEST(accepted({"--model", "deepfm"}).ctr);
    expect_error({"--model", "wide-deep", "--device", "cuda"}, "--device cuda: --model wide-deep runs on the CPU");
    expect_error({"--data-dir", dir, "--embedding-optimizer", "sgd"},
                 "--embedding-optimizer: sgd not in {adagrad,adam,ftrl}");
    expect_error({"--data-dir", dir, "--embedding-dim", "0"}, "--embedding-dim");
    unlink(tsv.c_str());
    rmdir(dir);
}

BOOST_AUTO_TEST_CASE(precision_is_fp32_unless_bf16_is_asked_for)
{
    BOOST_TEST((accepted({}).precision == pstrain::compute::precision::fp32));
    BOOST_TEST((accepted({"--precision", "fp32"}).precision == pstrain::compute::precision::fp32));
    BOOST_TEST((accepted({"--precision", "bf16"}).precision == pstrain::compute::precision::bf16));
    BOOST_TEST((accepted({"--precision=bf16", "--model", "cnn"}).precision == pstrain::compute::precision::bf16));
}

BOOST_AUTO_TEST_CASE(a_bad_precision_is_one_line_naming_the_flag_and_the_words)
{
    std::optional<train_options> o;
    int code = 0;
    const auto err = parse({"--precision", "fp16"}, o, code);
    BOOST_TEST(!o.has_value());
    BOOST_TEST(code == 2);
    BOOST_TEST(err == "pstrain: error: --precision: fp16 not in {fp32,bf16}: see pstrain --help\n");
}

BOOST_AUTO_TEST_CASE(the_wire_precision_is_fp32_unless_bf16_is_asked_for)
{
    BOOST_TEST((accepted({}).wire_precision == pstrain::ps::wire_precision::fp32));
    BOOST_TEST((accepted({"--wire-precision", "fp32"}).wire_precision == pstrain::ps::wire_precision::fp32));
    BOOST_TEST((accepted({"--wire-precision=bf16"}).wire_precision == pstrain::ps::wire_precision::bf16));
    // The two precisions are independent.
    const auto both = accepted({"--wire-precision", "bf16", "--precision", "fp32"});
    BOOST_TEST((both.wire_precision == pstrain::ps::wire_precision::bf16));
    BOOST_TEST((both.precision == pstrain::compute::precision::fp32));
}

BOOST_AUTO_TEST_CASE(a_bad_wire_precision_is_one_line_naming_the_flag_and_the_words)
{
    std::optional<train_options> o;
    int code = 0;
    const auto err = parse({"--wire-precision", "fp16"}, o, code);
    BOOST_TEST(!o.has_value());
    BOOST_TEST(code == 2);
    BOOST_TEST(err == "pstrain: error: --wire-precision: fp16 not in {fp32,bf16}: see pstrain --help\n");
}

BOOST_AUTO_TEST_CASE(bf16_is_accepted_on_either_device_and_for_the_click_through_models)
{
    // Whether the device multiplies bf16 is the backend's to say, at start
    // (a CPU without AMX or AVX512-BF16, a GPU below compute capability 8.0).
    BOOST_TEST((accepted({"--precision", "bf16", "--device", "cuda"}).precision == pstrain::compute::precision::bf16));
    // The click-through models' deep part multiplies in bf16 too.
    BOOST_TEST((accepted({"--precision", "bf16", "--model", "deepfm"}).precision == pstrain::compute::precision::bf16));
}

BOOST_AUTO_TEST_CASE(max_staleness_is_unbounded_unless_given)
{
    BOOST_TEST(accepted({}).max_staleness == pstrain::ps::unbounded_staleness);
    BOOST_TEST(accepted({"--max-staleness", "0"}).max_staleness == 0);
    BOOST_TEST(accepted({"--max_staleness=8"}).max_staleness == 8);
}

BOOST_AUTO_TEST_CASE(a_negative_max_staleness_is_one_line_naming_the_fix)
{
    expect_error({"--max-staleness", "-1"},
                 "--max-staleness -1: give 0 (lock-step) or more steps, or leave it out for no bound");
}

BOOST_AUTO_TEST_CASE(max_staleness_with_sync_replicas_is_one_line_naming_the_fix)
{
    expect_error({"--sync-replicas", "--max-staleness", "2"},
                 "--max-staleness bounds async training and --sync-replicas trains in lock-step already: give one of "
                 "them");
}

BOOST_AUTO_TEST_CASE(bucket_mb_is_4_unless_given_and_0_turns_the_overlap_off)
{
    BOOST_TEST(accepted({}).bucket_mb == 4.0);
    BOOST_TEST(accepted({"--sync-replicas", "--bucket-mb", "0.5"}).bucket_mb == 0.5);
    BOOST_TEST(accepted({"--bucket-mb", "2"}).bucket_mb == 2.0);  // async buckets too
    BOOST_TEST(accepted({"--bucket-mb", "0"}).bucket_mb == 0.0);
}

BOOST_AUTO_TEST_CASE(a_negative_bucket_mb_is_one_line_naming_the_flag)
{
    expect_error({"--sync-replicas", "--bucket-mb", "-1"}, "--bucket-mb");
    expect_error({"--bucket-mb", "-1"}, "--bucket-mb");
}

BOOST_AUTO_TEST_CASE(elastic_is_off_unless_given)
{
    BOOST_TEST(!accepted({"--sync-replicas"}).elastic);
    BOOST_TEST(accepted({"--sync-replicas", "--elastic"}).elastic);
    BOOST_TEST(accepted({"--elastic"}).elastic);
}

BOOST_AUTO_TEST_CASE(ps_spares_come_from_the_flag_or_the_plugins_environment)
{
    BOOST_TEST(accepted({}).ps_spares == 0);
    BOOST_TEST(accepted({"--ps-spares", "2", "--checkpoint-dir", "/tmp"}).ps_spares == 2);
    ::setenv("PSTRAIN_PS_SPARES", "1", 1);
    const auto from_env = accepted({"--checkpoint-dir", "/tmp"}).ps_spares;
    const auto flag_wins = accepted({"--ps-spares", "3", "--checkpoint-dir", "/tmp"}).ps_spares;
    ::unsetenv("PSTRAIN_PS_SPARES");
    BOOST_TEST(from_env == 1);
    BOOST_TEST(flag_wins == 3);
}

BOOST_AUTO_TEST_CASE(max_workers_is_room_for_an_elastic_job_to_grow)
{
    BOOST_TEST(accepted({}).max_workers == 0, "no room beyond the job's workers unless asked");
    BOOST_TEST(accepted({"--elastic", "--max-workers", "8"}).max_workers == 8);
    expect_error({"--max-workers", "8"}, "--max-workers 8: room for workers that join later is for --elastic jobs: "
                                         "give --elastic to every task too");
    expect_error({"--max-workers", "8", "--elastic", "--standalone"},
                 "--max-workers 8: --standalone has one worker and no room for others: leave one of them out");
    std::optional<train_options> o;
    int code = 0;
    parse({"--elastic", "--max-workers", "0"}, o, code);
    BOOST_TEST(!o.has_value());
    BOOST_TEST(code == 2);
}

BOOST_AUTO_TEST_CASE(ps_spares_without_a_checkpoint_dir_or_with_standalone_is_one_line_naming_the_fix)
{
    expect_error({"--ps-spares", "1"}, "--ps-spares 1: a spare restores a lost PS's shard from the newest checkpoint: "
                                       "give --checkpoint-dir on a path every node shares");
    expect_error({"--ps-spares", "1", "--elastic", "--checkpoint-dir", "/tmp"},
                 "--ps-spares 1 with --elastic: a worker that joins later does not yet learn which spare stands in "
                 "for a lost PS: give one of them");
    expect_error({"--ps-spares", "1", "--standalone", "--checkpoint-dir", "/tmp"},
                 "--ps-spares 1: --standalone has no ps task to lose: leave one of them out");
}
