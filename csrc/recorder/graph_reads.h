// What the capture path reads from the driver: each capturing stream's frontier around every
// launch, and a capture graph's nodes at every capture's end and every catch-up, where a
// Python call per node would cost more than the capture itself. The C++ twin of
// streamrace/record/graph_readback.py (GraphReadback), with the same names and failures.
#pragma once

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "driver.h"
#include "hook_tables.h"
#include "hook_timers.h"

namespace streamrace {

// A capturing stream's frontier: the nodes its next launch will depend on. A launch on the
// stream makes its node the whole frontier, so comparing frontiers tells whether something
// launched, in constant time (counting the graph's nodes walks the whole graph). Empty when
// the stream is not capturing.
using Frontier = c10::SmallVector<int64_t, 4>;

inline Frontier frontier(const Driver& driver, int64_t stream) {
    STREAMRACE_TIMED(Frontier);
    Frontier nodes;
    if (driver.capture_info == nullptr) return nodes;
    int status = 0;
    uint64_t id = 0;
    void* graph = nullptr;
    void* const* deps = nullptr;
    size_t count = 0;
    if (driver.call(driver.capture_info, reinterpret_cast<void*>(stream), &status, &id, &graph, &deps, &count) != 0 ||
        status != tables::kCaptureStatusActive) {
        return nodes;
    }
    for (size_t i = 0; i < count; ++i) nodes.push_back(reinterpret_cast<int64_t>(deps[i]));
    return nodes;
}

inline bool contains(const Frontier& f, int64_t node) { return std::find(f.begin(), f.end(), node) != f.end(); }

inline bool subset(const Frontier& a, const Frontier& b) {
    return std::all_of(a.begin(), a.end(), [&](int64_t n) { return contains(b, n); });
}

// The trace's name of a CUgraphNodeType value (hook_tables.node_type_name).
inline std::string node_type_name(int type) {
    constexpr int listed = static_cast<int>(sizeof(tables::kNodeTypes) / sizeof(tables::kNodeTypes[0]));
    if (type >= 0 && type < listed) return tables::kNodeTypes[type];
    return tables::kUnlistedNodeTypePrefix + std::to_string(type);
}

namespace detail {
inline void check(int err, const char* what) {
    if (err != 0) throw std::runtime_error(std::string(what) + " failed (CUresult " + std::to_string(err) + ")");
}
}  // namespace detail

// How many nodes the graph has (CUDA counts them one by one: not for every launch).
inline int64_t node_count(const Driver& driver, int64_t graph) {
    if (driver.get_nodes == nullptr) throw std::runtime_error("the driver has no cuGraphGetNodes");
    size_t count = 0;
    detail::check(driver.call(driver.get_nodes, reinterpret_cast<void*>(graph), nullptr, &count), "cuGraphGetNodes");
    return static_cast<int64_t>(count);
}

// Every node, in creation order. `expected`: about how many there are (0: not known). Each
// call of the driver walks the whole graph, and it fills an array up to its size and says how
// many it wrote: an array with room to spare reads them in one walk, where counting first
// takes two (a full one is read again at the counted size).
inline std::vector<int64_t> node_handles(const Driver& driver, int64_t graph, size_t expected = 0) {
    if (driver.get_nodes == nullptr) throw std::runtime_error("the driver has no cuGraphGetNodes");
    std::vector<void*> nodes;
    size_t count = 0;
    if (expected > 0) {
        const size_t room = expected + expected / 8 + 64;
        nodes.resize(room);
        count = room;
        detail::check(driver.call(driver.get_nodes, reinterpret_cast<void*>(graph), nodes.data(), &count), "cuGraphGetNodes");
    }
    if (expected == 0 || count >= nodes.size()) {
        count = static_cast<size_t>(node_count(driver, graph));
        // The driver refuses a node array with a zero count (an empty capture): nothing to read.
        if (count == 0) return {};
        nodes.resize(count);
        detail::check(driver.call(driver.get_nodes, reinterpret_cast<void*>(graph), nodes.data(), &count), "cuGraphGetNodes");
    }
    std::vector<int64_t> out;
    out.reserve(count);
    for (size_t i = 0; i < count; ++i) out.push_back(reinterpret_cast<int64_t>(nodes[i]));
    return out;
}

// The nodes of a graph read on this thread after another one (or the same, grown): the count
// the previous read found is the guess. A capture's graph only grows, and its catch-ups and
// its end's read-back follow each other.
inline std::vector<int64_t> node_handles_as_before(const Driver& driver, int64_t graph) {
    static thread_local size_t previous = 0;
    std::vector<int64_t> handles = node_handles(driver, graph, previous);
    previous = handles.size();
    return handles;
}

inline int node_type(const Driver& driver, int64_t node) {
    if (driver.node_type == nullptr) throw std::runtime_error("the driver has no cuGraphNodeGetType");
    int type = 0;
    detail::check(driver.call(driver.node_type, reinterpret_cast<void*>(node), &type), "cuGraphNodeGetType");
    return type;
}

// CUgraphNodeType values of the nodes that name an event (hook_tables.NODE_TYPES).
constexpr int kWaitEventNode = 6, kEventRecordNode = 7;

// The event an event record or wait node records or waits on; 0 for any other node, or where
// the driver cannot tell (GraphReadback.node_event).
inline int64_t node_event(const Driver& driver, int64_t node, int type) {
    Driver::NodeEvent query = type == kEventRecordNode ? driver.record_node_event
                              : type == kWaitEventNode ? driver.wait_node_event
                                                       : nullptr;
    void* event = nullptr;
    if (query == nullptr || driver.call(query, reinterpret_cast<void*>(node), &event) != 0) return 0;
    return reinterpret_cast<int64_t>(event);
}

// The function a kernel node runs: its CUfunction, else its CUkernel (the other null); both
// null when the driver cannot tell.
struct KernelFunction {
    void* func = nullptr;
    void* kern = nullptr;
    bool operator==(const KernelFunction& o) const { return func == o.func && kern == o.kern; }
};

inline KernelFunction kernel_function(const Driver& driver, int64_t node) {
    KernelNodeParams params{};
    if (driver.kernel_params == nullptr || driver.call(driver.kernel_params, reinterpret_cast<void*>(node), &params) != 0) return {};
    if (params.func != nullptr) return {params.func, nullptr};
    return {nullptr, params.kern};
}

// The function's name as the driver gives it (not cut), null when it cannot tell.
inline const char* function_name(const Driver& driver, const KernelFunction& f) {
    const char* name = nullptr;
    if (f.func != nullptr && driver.func_name != nullptr) {
        if (driver.call(driver.func_name, &name, f.func) != 0) name = nullptr;
    } else if (f.kern != nullptr && driver.kernel_name != nullptr) {
        if (driver.call(driver.kernel_name, &name, f.kern) != 0) name = nullptr;
    }
    return name;
}

// A kernel function's name (where it has a CUfunction) and the (offset, size) of each of its
// parameters: the same for every node that runs it, so read once per function (FunctionLayouts).
struct FunctionLayout {
    bool named = false;
    std::string name;
    std::vector<std::pair<size_t, size_t>> params;
};

struct KernelFunctionHash {
    size_t operator()(const KernelFunction& f) const {
        return std::hash<const void*>()(f.func) ^ (std::hash<const void*>()(f.kern) << 1);
    }
};

// The layouts read so far, by function. Kept no longer than the caller knows each function to
// be loaded (a module unloaded may leave its function's address to another).
using FunctionLayouts = std::unordered_map<KernelFunction, FunctionLayout, KernelFunctionHash>;

// A kernel node's parameters as the words that may be pointers, per parameter (every 8-byte
// word of its bytes at least kMinPointer: small integers are sizes, flags and seeds), and its
// function's name where it has a CUfunction; the C++ twin of kernel_params._kernel. Empty
// when the driver cannot give parameter layouts (then Python reads them).
struct KernelParams {
    bool read = false;
    std::string name;  // empty: none
    bool named = false;
    std::vector<std::vector<uint64_t>> params;
};

namespace detail {
inline std::vector<uint64_t> words(const unsigned char* bytes, size_t size) {
    std::vector<uint64_t> out;
    for (size_t j = 0; j + 8 <= size; j += 8) {
        uint64_t value = 0;
        for (int b = 7; b >= 0; --b) value = (value << 8) | bytes[j + static_cast<size_t>(b)];  // little endian
        if (value >= tables::kMinPointer) out.push_back(value);
    }
    return out;
}

inline FunctionLayout function_layout(const Driver& driver, const KernelNodeParams& p) {
    FunctionLayout out;
    if (p.func != nullptr) {
        const char* name = nullptr;
        check(driver.func_name == nullptr ? 1 : driver.call(driver.func_name, &name, p.func), "cuFuncGetName");
        out.named = name != nullptr;
        if (name != nullptr) out.name = name;
    }
    // (offset, size) of each parameter, until the driver says there are no more.
    while ((p.func != nullptr || p.kern != nullptr) && out.params.size() < tables::kMaxKernelParams) {
        size_t offset = 0, size = 0;
        int err = p.func != nullptr ? driver.call(driver.func_param_info, p.func, out.params.size(), &offset, &size)
                                    : driver.call(driver.kernel_param_info, p.kern, out.params.size(), &offset, &size);
        if (err != 0) break;
        out.params.emplace_back(offset, size);
    }
    return out;
}
}  // namespace detail

inline KernelParams kernel_params(const Driver& driver, int64_t node, FunctionLayouts& layouts) {
    KernelParams out;
    if (driver.func_param_info == nullptr || driver.kernel_param_info == nullptr || driver.kernel_params == nullptr) {
        return out;
    }
    KernelNodeParams p{};
    detail::check(driver.call(driver.kernel_params, reinterpret_cast<void*>(node), &p), "cuGraphKernelNodeGetParams");
    out.read = true;
    const KernelFunction function{p.func, p.func != nullptr ? nullptr : p.kern};
    auto known = layouts.find(function);
    if (known == layouts.end()) known = layouts.emplace(function, detail::function_layout(driver, p)).first;
    const FunctionLayout& layout = known->second;
    out.named = layout.named;
    out.name = layout.name;
    if (p.kernel_params != nullptr) {
        for (size_t i = 0; i < layout.params.size(); ++i) {
            const auto* bytes = static_cast<const unsigned char*>(p.kernel_params[i]);
            out.params.push_back(bytes != nullptr ? detail::words(bytes, layout.params[i].second) : std::vector<uint64_t>());
        }
    } else if (p.extra != nullptr) {
        // extra: (key, value) pairs in any order up to CU_LAUNCH_PARAM_END (0): the buffer
        // (CU_LAUNCH_PARAM_BUFFER_POINTER, 1) and a pointer to its size (..._SIZE, 2).
        const void* buffer = nullptr;
        const void* size_at = nullptr;
        for (size_t k = 0; k < 2 * tables::kMaxExtraPairs && p.extra[k] != nullptr; k += 2) {
            auto key = reinterpret_cast<uintptr_t>(p.extra[k]);
            if (key == 1) buffer = p.extra[k + 1];
            if (key == 2) size_at = p.extra[k + 1];
        }
        if (buffer != nullptr && size_at != nullptr) {
            size_t size = *static_cast<const size_t*>(size_at);
            const auto* packed = static_cast<const unsigned char*>(buffer);
            for (auto [offset, n] : layout.params) {
                size_t end = std::min(size, offset + n);
                out.params.push_back(offset < end ? detail::words(packed + offset, end - offset) : std::vector<uint64_t>());
            }
        }
    }
    return out;
}

// Every edge of the graph, by node handle; `programmatic`: a dependent-launch edge, which does
// not order completion.
struct Edge {
    int64_t from;
    int64_t to;
    bool programmatic;
};

// Every edge, read as node_handles reads nodes: each call of the driver walks the whole graph,
// so an array with room for as many as the previous read found (plus some) reads them in one.
inline std::vector<Edge> graph_edges(const Driver& driver, int64_t graph) {
    if (driver.edges == nullptr) throw std::runtime_error("the driver has no cuGraphGetEdges");
    static thread_local size_t previous = 0;
    void* g = reinterpret_cast<void*>(graph);
    std::vector<void*> from, to;
    std::vector<EdgeData> data;
    size_t count = 0;
    if (previous > 0) {
        count = previous + previous / 8 + 64;
        from.resize(count);
        to.resize(count);
        data.resize(count);
        detail::check(driver.call(driver.edges, g, from.data(), to.data(), data.data(), &count), "cuGraphGetEdges");
    }
    if (previous == 0 || count >= from.size()) {
        count = 0;
        detail::check(driver.call(driver.edges, g, nullptr, nullptr, nullptr, &count), "cuGraphGetEdges");
        if (count > 0) {  // the driver refuses arrays with a zero count
            from.resize(count);
            to.resize(count);
            data.resize(count);
            detail::check(driver.call(driver.edges, g, from.data(), to.data(), data.data(), &count), "cuGraphGetEdges");
        }
    }
    previous = count;
    constexpr unsigned char kProgrammatic = 1;  // CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
    std::vector<Edge> out;
    out.reserve(count);
    for (size_t k = 0; k < count; ++k) {
        out.push_back({reinterpret_cast<int64_t>(from[k]), reinterpret_cast<int64_t>(to[k]),
                       data[k].type == kProgrammatic});
    }
    return out;
}

// The nodes `node` depends on, into `out`; false where the driver cannot tell (no such
// function, a failure), so the caller walks the graph instead. Edge data is asked for with
// the nodes: the driver refuses a query without room for it where an edge has data
// (CUDA_ERROR_LOSSY_QUERY).
inline bool node_dependencies(const Driver& driver, int64_t node, c10::SmallVectorImpl<int64_t>& out) {
    STREAMRACE_TIMED(CatchUpTrace);
    out.clear();
    if (driver.node_dependencies == nullptr) return false;
    constexpr size_t kRoom = 8;
    void* deps[kRoom];
    EdgeData data[kRoom];
    size_t count = kRoom;
    if (driver.call(driver.node_dependencies, reinterpret_cast<void*>(node), deps, data, &count) != 0) return false;
    if (count < kRoom) {
        for (size_t i = 0; i < count; ++i) out.push_back(reinterpret_cast<int64_t>(deps[i]));
        return true;
    }
    // As many as the room, or more: counted, then read whole.
    count = 0;
    if (driver.call(driver.node_dependencies, reinterpret_cast<void*>(node), nullptr, nullptr, &count) != 0) return false;
    std::vector<void*> all(count);
    std::vector<EdgeData> all_data(count);
    size_t read = count;
    if (count > 0 && driver.call(driver.node_dependencies, reinterpret_cast<void*>(node), all.data(), all_data.data(), &read) != 0) {
        return false;
    }
    if (read != count) return false;  // changed between the two calls: another thread's launch
    for (void* dep : all) out.push_back(reinterpret_cast<int64_t>(dep));
    return true;
}

// (index, handle, type) of the nodes after the one `last_claim` names, and from index `floor`
// on at least.
inline std::vector<std::tuple<int64_t, int64_t, std::string>> nodes_since(const Driver& driver, int64_t graph,
                                                                          int64_t last_claim, int64_t floor) {
    STREAMRACE_TIMED(CatchUpWalk);
    std::vector<int64_t> handles = node_handles_as_before(driver, graph);
    int64_t seen = floor;
    for (int64_t i = static_cast<int64_t>(handles.size()) - 1; i >= seen && last_claim != 0; --i) {
        if (handles[i] == last_claim) {
            seen = i + 1;
            break;
        }
    }
    std::vector<std::tuple<int64_t, int64_t, std::string>> out;
    for (int64_t i = seen; i < static_cast<int64_t>(handles.size()); ++i) {
        out.emplace_back(i, handles[i], node_type_name(node_type(driver, handles[i])));
    }
    return out;
}

}  // namespace streamrace
