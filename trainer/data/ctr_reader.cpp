#include "trainer/data/ctr_reader.hpp"

#include "pstrain/error.hpp"

#include <algorithm>
#include <system_error>

#include <fmt/format.h>

namespace pstrain::data {

std::vector<std::filesystem::path> ctr_train_files(const std::filesystem::path& path)
{
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) return {path};
    if (!std::filesystem::is_directory(path, ec))
        throw error(
            fmt::format("--data-dir {}: no such file or directory: give --data-dir a folder of Criteo-style .tsv "
                        "click-through files (make some with `pstrain datagen ctr DIR`)",
                        path.string()));
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
        const auto ext = e.path().extension();
        if (e.is_regular_file() && (ext == ".tsv" || ext == ".txt") && e.path().filename() != "test.tsv")
            files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
        throw error(
            fmt::format("{}: no .tsv or .txt files (test.tsv is the held-out part): make some with `pstrain datagen "
                        "ctr {}`",
                        path.string(), path.string()));
    return files;
}

ctr_reader::ctr_reader(std::vector<std::filesystem::path> files, std::size_t shard, std::size_t num_shards, bool skip)
    : files_(std::move(files)), shard_(shard), num_shards_(num_shards), skip_(skip)
{
    if (num_shards_ == 0 || shard_ >= num_shards_)
        throw error(fmt::format("ctr_reader: shard {} of {} does not exist", shard_, num_shards_));
    if (files_.empty()) throw error("ctr_reader: no files to read");
    rewind();
}

void ctr_reader::reshard(std::size_t shard, std::size_t num_shards)
{
    if (num_shards == 0 || shard >= num_shards)
        throw error(fmt::format("ctr_reader: shard {} of {} does not exist", shard, num_shards));
    shard_ = shard;
    num_shards_ = num_shards;
}

void ctr_reader::rewind()
{
    file_ = 0;
    line_ = 0;
    in_.close();
    in_.clear();
    in_.open(files_[0]);
    file_line_ = 0;
    if (!in_) throw error(fmt::format("{}: cannot open: check its permissions", files_[0].string()));
}

bool ctr_reader::open_next_file()
{
    if (++file_ >= files_.size()) return false;
    in_.close();
    in_.clear();
    in_.open(files_[file_]);
    file_line_ = 0;
    if (!in_) throw error(fmt::format("{}: cannot open: check its permissions", files_[file_].string()));
    return true;
}

bool ctr_reader::next(ctr_sample& out)
{
    for (;;) {
        if (!std::getline(in_, text_)) {
            if (in_.bad()) throw error(fmt::format("{}: read error after line {}", files_[file_].string(), file_line_));
            if (!open_next_file()) return false;
            continue;
        }
        ++file_line_;
        if (text_.empty() || (text_.size() == 1 && text_[0] == '\r')) continue;
        if (line_++ % num_shards_ != shard_) continue;
        std::string why;
        if (parse_ctr_line(text_, out, why)) return true;
        if (!skip_)
            throw error(fmt::format("{}:{}: {}: fix the line, or pass --skip-bad-lines to count and skip such lines",
                                    files_[file_].string(), file_line_, why));
        ++bad_lines_;
    }
}

}  // namespace pstrain::data
