// A growing array of plain records in fixed chunks, for the event log: appending never moves
// what is stored (a vector's growth copied the whole log at each doubling, and touched that
// much fresh memory again), and chunks a drained log gave back are taken again first (up to
// a bound, process-wide), so a recording that flushes as it goes, or the next recording,
// writes into memory already paged in. Elements are addressed by index; a run of them can be
// kept contiguous (a range's shape and stride), a run longer than a chunk in one allocation
// of its own that spans as many chunks' indices.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace streamrace {

template <typename T, size_t kPerChunk>
class Chunked {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
    static_assert((kPerChunk & (kPerChunk - 1)) == 0, "a power of two: an index splits by shifts");

    struct Storage {
        alignas(T) unsigned char bytes[sizeof(T) * kPerChunk];
    };
    using Chunk = std::unique_ptr<Storage>;

   public:
    Chunked() = default;
    Chunked(Chunked&& other) noexcept { swap(other); }
    Chunked& operator=(Chunked&& other) noexcept {
        swap(other);
        return *this;
    }
    Chunked(const Chunked&) = delete;
    Chunked& operator=(const Chunked&) = delete;
    ~Chunked() { give_back(chunks_); }

    // One past the last index handed out (a run that did not fit a chunk's end skipped it).
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    T& operator[](size_t i) { return at(i); }
    const T& operator[](size_t i) const { return const_cast<Chunked*>(this)->at(i); }

    T& emplace_back() { return *new (slots(1)) T(); }
    void push_back(const T& value) { *slots(1) = value; }

    // `n` consecutive slots in memory; `first`: the index of the first.
    T* append_run(size_t n, size_t& first) {
        if (n > kPerChunk) return long_run(n, first);
        T* run = slots(n);
        first = size_ - n;
        return run;
    }

    void swap(Chunked& other) noexcept {
        chunks_.swap(other.chunks_);
        starts_.swap(other.starts_);
        long_runs_.swap(other.long_runs_);
        std::swap(size_, other.size_);
    }

   private:
    T& at(size_t i) { return starts_[i / kPerChunk][i % kPerChunk]; }

    T* slots(size_t n) {
        size_t offset = size_ % kPerChunk;
        if (offset + n > kPerChunk && offset != 0) size_ += kPerChunk - offset;  // to the next chunk
        if (size_ / kPerChunk == starts_.size()) {
            chunks_.push_back(take_chunk());
            starts_.push_back(reinterpret_cast<T*>(chunks_.back()->bytes));
        }
        T* first = &at(size_);
        size_ += n;
        return first;
    }

    // A run longer than a chunk (a tensor of thousands of dimensions): an allocation of its
    // own, whole chunks' worth, each of their indices pointing into it.
    T* long_run(size_t n, size_t& first) {
        if (size_ % kPerChunk != 0) size_ += kPerChunk - size_ % kPerChunk;
        size_t count = (n + kPerChunk - 1) / kPerChunk;
        long_runs_.push_back(std::make_unique<T[]>(count * kPerChunk));
        T* run = long_runs_.back().get();
        for (size_t c = 0; c < count; ++c) starts_.push_back(run + c * kPerChunk);
        first = size_;
        size_ += count * kPerChunk;
        return run;
    }

    // The process's spare chunks of this type, at most kSpareBytes of them.
    static constexpr size_t kSpareBytes = size_t(32) << 20;
    struct Spares {
        std::mutex mutex;
        std::vector<Chunk> chunks;
    };
    static Spares& spares() {
        static auto* all = new Spares();  // never destroyed: logs die at exit in any order
        return *all;
    }
    static Chunk take_chunk() {
        Spares& s = spares();
        {
            std::lock_guard<std::mutex> lock(s.mutex);
            if (!s.chunks.empty()) {
                Chunk c = std::move(s.chunks.back());
                s.chunks.pop_back();
                return c;
            }
        }
        return Chunk(new Storage);
    }
    static void give_back(std::vector<Chunk>& chunks) {
        if (chunks.empty()) return;
        Spares& s = spares();
        std::lock_guard<std::mutex> lock(s.mutex);
        for (Chunk& c : chunks) {
            if (s.chunks.size() * sizeof(Storage) >= kSpareBytes) break;  // the rest are freed
            s.chunks.push_back(std::move(c));
        }
        chunks.clear();
    }

    std::vector<Chunk> chunks_;                  // owned, given back to the spares
    std::vector<std::unique_ptr<T[]>> long_runs_;  // owned, freed
    std::vector<T*> starts_;                     // each chunk index's first element
    size_t size_ = 0;
};

}  // namespace streamrace
