// Click-through data read as a stream: the training files of a directory,
// each worker reading its share of their lines (Criteo's TSV format,
// ctr.hpp).
#pragma once

#include "trainer/data/ctr.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace pstrain::data {

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
    // The workers changed (an elastic job): from the next line on, every
    // num_shards-th line from line `shard` is this reader's.
    void reshard(std::size_t shard, std::size_t num_shards);

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

}  // namespace pstrain::data
