// TensorBoard event files: what `tensorboard --logdir DIR` reads.  Each
// file is a sequence of TFRecords (a length, its masked CRC-32C, the data,
// the data's masked CRC-32C) whose data are Event protobuf messages: first
// the file's version, then summaries of scalar values at a global step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::trainer::tensorboard {

// CRC-32C (Castagnoli), and the masked form TFRecord stores.
std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);

// One TFRecord around `data`.
std::string record(std::string_view data);

struct scalar {
    std::string tag;
    double value = 0;
};

// The serialized Event messages (for the writer and its tests).
std::string version_event(double wall_time);
std::string scalars_event(double wall_time, std::int64_t step, std::span<const scalar> values);
std::string session_start_event(double wall_time, std::int64_t step, const std::string& checkpoint);

class event_writer {
public:
    // Creates `dir` (and its parents; a directory made here is private,
    // 0700, its file 0600, as checkpoints are) and a new events file in it, named as
    // TensorFlow names them (events.out.tfevents.TIME.HOST...), so that
    // TensorBoard finds it; several runs into one directory add files.
    // Throws pstrain::error naming `flag`, the problem and the fix.
    event_writer(const std::string& dir, const std::string& flag);

    // Appends the scalars at `step` and flushes, so that TensorBoard sees
    // them while the job runs.  A failed write is one warning in the log,
    // and the writer stops.
    void write(std::int64_t step, std::span<const scalar> values);
    // A SessionLog START at `step`.  TensorBoard's server takes the first
    // START of a run (its directory, all files) as its beginning; at each
    // later one it forgets the scalars of the steps from `step` on written
    // before it, as after TensorFlow's restarts.  A run that starts at step
    // S (0, or a checkpoint's) or goes back to it and trains S+1... again:
    // session_start(S + 1).
    void session_start(std::int64_t step, const std::string& checkpoint);
    const std::string& path() const { return path_; }

private:
    struct file_closer {
        void operator()(std::FILE* f) const { std::fclose(f); }
    };
    bool append(const std::string& event);

    std::string path_;
    std::unique_ptr<std::FILE, file_closer> file_;
};

}  // namespace pstrain::trainer::tensorboard
