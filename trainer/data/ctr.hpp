// Click-through data: Criteo's TSV format (a label, 13 integer features and
// 26 categorical ones as hex strings, any of them blank), read as a stream
// and sharded per worker; a planted-teacher generator of such data whose
// own AUC (what a model knowing every id's weight reaches) is known; and
// the AUC itself.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pstrain::data {

inline constexpr int ctr_numeric_fields = 13;
inline constexpr int ctr_categorical_fields = 26;

struct ctr_sample {
    float label = 0;                                        // 0 or 1
    // log(1 + x) of each integer feature (negative values: -log(1 - x)); 0 when blank.
    std::array<float, ctr_numeric_fields> numeric{};
    // The 64-bit keys of every categorical field, field after field: each
    // the field and one id hashed together (a blank is an id of its own), so
    // fields never share keys.  A field holds one id, or several separated
    // by commas (a multi-hot field: an embedding bag).
    std::vector<std::uint64_t> keys;
    // Field f's keys are keys[field_begin[f] .. field_begin[f + 1]).
    std::array<std::uint32_t, ctr_categorical_fields + 1> field_begin{};

    std::span<const std::uint64_t> field(int f) const
    {
        const auto i = static_cast<std::size_t>(f);
        return std::span<const std::uint64_t>(keys).subspan(field_begin[i], field_begin[i + 1] - field_begin[i]);
    }
};

// The most ids one multi-hot field may hold.
inline constexpr std::size_t ctr_max_bag = 1024;

// Parses one line (without its newline).  False, with `why` naming the
// field and what is wrong, when it is not a Criteo line.
bool parse_ctr_line(std::string_view line, ctr_sample& out, std::string& why);

// The TSV files of a directory (*.tsv and *.txt, sorted by name; test.tsv
// left out: it is the held-out part), or one file.  Throws pstrain::error
// naming the path when there is nothing to read.
std::vector<std::filesystem::path> ctr_train_files(const std::filesystem::path& dir_or_file);

// Reads the lines of `files` one after the other, keeping every
// num_shards-th line from line `shard` (0-based over all files): each
// worker its share, no line twice.
class ctr_reader {
public:
    ctr_reader(std::vector<std::filesystem::path> files, std::size_t shard = 0, std::size_t num_shards = 1,
               bool skip_bad_lines = false);

    // The next sample of this shard; false at the end of the files.  A
    // malformed line throws pstrain::error naming its file and line, or,
    // with skip_bad_lines, is counted and skipped.
    bool next(ctr_sample& out);
    // From the first file again (another epoch).
    void rewind();

    std::uint64_t bad_lines() const { return bad_lines_; }
    std::uint64_t lines_read() const { return line_; }

private:
    bool open_next_file();

    std::vector<std::filesystem::path> files_;
    std::size_t shard_, num_shards_;
    bool skip_;
    std::size_t file_ = 0;
    std::ifstream in_;
    std::uint64_t line_ = 0;       // over all files, for the shard
    std::uint64_t file_line_ = 0;  // in this file, for messages
    std::uint64_t bad_lines_ = 0;
    std::string text_;
};

// Area under the ROC curve of `scores` for `labels` (0/1); ties count one
// half.  0.5 when one class is missing.
double auc(std::span<const float> scores, std::span<const float> labels);

struct ctr_generator_options {
    std::uint64_t samples = 1000000;
    std::uint64_t seed = 1;
    double test_fraction = 0.1;         // the last part goes to test.tsv
    std::uint64_t lines_per_file = 1000000;
    double zipf = 1.1;                  // popularity of each field's ids
    int factors = 4;                    // the teacher's factorisation-machine rank
};

struct ctr_generated {
    std::uint64_t train_samples = 0, test_samples = 0;
    std::vector<std::filesystem::path> files;
    double oracle_auc = 0;              // of the teacher's own probabilities, on test.tsv
    double oracle_logloss = 0;
    double click_rate = 0;
};

// `pstrain datagen ctr`: writes train-NNNNN.tsv files, test.tsv and
// oracle.json into `dir` (made if missing).  Each line's clicks are drawn
// from a hidden factorisation machine over its ids (Zipf-distributed per
// field, each field with its own vocabulary) and numeric features, so the
// best AUC any model can reach is the teacher's own, written to
// oracle.json.  Throws pstrain::error naming the path when it cannot write.
ctr_generated generate_ctr(const std::filesystem::path& dir, const ctr_generator_options& o);

}  // namespace pstrain::data
