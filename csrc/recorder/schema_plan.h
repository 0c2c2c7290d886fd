// What an operator's schema says about each of its arguments and returns, worked out once per
// operator: the same rules as streamrace/record/op_accesses.py (the reference), over the same
// tables (hook_tables.h), so the native and the Python hooks record the same accesses.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/function_schema.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "hook_tables.h"

namespace streamrace {

// Index: read, and it picks where an op that writes through an index writes (the trace's `index`).
enum class Role : uint8_t { Skip, Read, Write, Index };

struct SchemaPlan {
    std::string name;      // "aten::add.Tensor", as reports show it
    std::string overload;  // to verify a cache hit
    bool touches = true;   // false: launches nothing (record_stream, set_, inplace views)
    bool record_stream = false;
    // Has a CompositeImplicitAutograd kernel: while autograd is on, the dispatcher may take
    // it apart into other ops above the Python key, and then those are what is recorded.
    bool decomposable = false;
    // One of PyTorch's own namespaces (hook_tables.TRUSTED_NAMESPACES): its kernels' pointers
    // are not cross-checked against its schema.
    bool trusted = false;
    // Pinned host memory (host_memory.py's rules): the host waits for the device work it reads
    // (item); a copy between host and device (done on return unless non_blocking); a factory
    // whose result is pinned; the arguments `non_blocking` and `pin_memory`, or -1.
    bool host_wait = false;
    bool host_copy = false;
    bool pin_factory = false;
    int non_blocking_arg = -1;
    int pin_memory_arg = -1;
    std::vector<Role> args;        // per schema argument
    std::vector<bool> returns;     // per schema return: a fresh tensor the op writes
    bool any_return_written = false;
    // One of PyTorch's own ops that only hands values to the host (hook_tables.HOST_RESULT_TYPES):
    // captured, it touched nothing.
    bool host_result = false;
    int view_of = -1;  // a view op (detach, slice, alias): the argument its result views, else -1
    // PyTorch's own C++ kernel, never taken apart: what it calls may be silenced while it
    // runs (op_hooks.h, silence_kernel): no Python runs in it to start a profiler or a thread.
    bool silenceable = false;
    // Its kernel was seen calling other ops (learnt as ops run).
    mutable std::atomic<bool> calls_ops{false};
    // Its name's text id in the event log that last named it: (the log's serial << 32) | id.
    mutable std::atomic<uint64_t> text_id{0};
};

namespace detail {

inline bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

inline bool ends_with(const std::string& s, const char* suffix) {
    size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

template <size_t N>
bool one_of(const std::string& s, const char* const (&names)[N]) {
    for (const char* name : names) {
        if (s == name) return true;
    }
    return false;
}

// A factory's tensor arguments are templates, never read.
inline bool is_factory(const std::string& base) {
    return starts_with(base, tables::kFactoryPrefix) || ends_with(base, tables::kFactorySuffix);
}

// Writes through its `index` / `indices` arguments (hook_tables.INDEX_WRITE_OPS, by the name
// without a trailing underscore).
inline bool writes_through_index(std::string base) {
    if (ends_with(base, "_")) base.pop_back();
    return one_of(base, tables::kIndexWriteOps);
}

// Allocates, no kernel touches the result.
inline bool allocates_only(std::string base) {
    if (starts_with(base, tables::kFactoryPrefix)) base = base.substr(std::strlen(tables::kFactoryPrefix));
    return one_of(base, tables::kAllocateOnlyOps);
}

// A c10d collective's written arguments (hook_tables.COLLECTIVE_OUTPUTS): its schema does not say.
inline bool collective_writes(const std::string& op, const std::string& argument) {
    for (const auto& pair : tables::kCollectiveOutputs) {
        if (op == pair[0] && argument == pair[1]) return true;
    }
    return false;
}

}  // namespace detail

inline std::unique_ptr<SchemaPlan> make_plan(const c10::FunctionSchema& schema) {
    auto plan = std::make_unique<SchemaPlan>();
    const std::string& full = schema.name();
    plan->overload = schema.overload_name();
    plan->name = full + (plan->overload.empty() ? "" : "." + plan->overload);
    size_t colons = full.find("::");
    std::string base = colons == std::string::npos ? full : full.substr(colons + 2);
    auto op = c10::Dispatcher::singleton().findOp(schema.operator_name());
    bool inplace_view = op.has_value() && op->hasTag(at::Tag::inplace_view);
    plan->record_stream = full == "aten::record_stream";
    plan->touches = !(detail::one_of(base, tables::kNoAccessOps) || inplace_view);
    plan->decomposable = op.has_value() && op->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    for (const char* ns : tables::kTrustedNamespaces) plan->trusted |= detail::starts_with(full, ns);
    bool factory = detail::is_factory(base);
    bool through_index = detail::writes_through_index(base);
    bool collective = detail::one_of(full, tables::kCollectives);
    plan->host_wait = detail::one_of(base, tables::kHostWaitOps);
    plan->host_copy = detail::one_of(base, tables::kHostCopyOps);
    plan->pin_factory = detail::one_of(base, tables::kPinFactoryOps);
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
        const std::string& name = schema.arguments()[i].name();
        if (name == "non_blocking") plan->non_blocking_arg = static_cast<int>(i);
        if (name == "pin_memory") plan->pin_memory_arg = static_cast<int>(i);
    }
    for (const auto& argument : schema.arguments()) {
        const auto* alias = argument.alias_info();
        if (collective) {
            plan->args.push_back(detail::collective_writes(full, argument.name()) ? Role::Write : Role::Read);
        } else if (alias != nullptr && alias->isWrite()) {
            plan->args.push_back(Role::Write);
        } else if (factory || alias != nullptr) {
            plan->args.push_back(Role::Skip);  // metadata only: a view's input, a factory's template
        } else if (through_index && detail::one_of(argument.name(), tables::kIndexArguments)) {
            plan->args.push_back(Role::Index);
        } else {
            plan->args.push_back(Role::Read);
        }
    }
    bool view = false;
    for (const auto& ret : schema.returns()) view |= ret.alias_info() != nullptr && !ret.alias_info()->isWrite();
    for (size_t i = 0; view && i < schema.arguments().size(); ++i) {
        const auto* alias = schema.arguments()[i].alias_info();
        if (alias != nullptr && !alias->isWrite()) {
            plan->view_of = static_cast<int>(i);
            break;
        }
    }
    bool fresh = !detail::allocates_only(base) && !collective;
    plan->host_result = plan->trusted && !schema.returns().empty();
    plan->silenceable = !plan->decomposable && (detail::starts_with(full, "aten::") || detail::starts_with(full, "prims::"));
    for (const auto& ret : schema.returns()) {
        bool written = fresh && ret.alias_info() == nullptr;
        plan->returns.push_back(written);
        plan->any_return_written |= written;
        plan->host_result = plan->host_result && detail::one_of(ret.type()->str(), tables::kHostResultTypes);
    }
    for (Role role : plan->args) plan->host_result = plan->host_result && role != Role::Write;
    return plan;
}

// Plans by the address of the schema's name, which lives as long as the operator's
// registration; a hit is checked against the names, since a deregistered operator's memory
// can be reused by another one.
class PlanCache {
   public:
    // The plan of the operator a RecordFunction stands for, or null for a range that is not
    // an operator (a named scope).
    const SchemaPlan* lookup(const at::RecordFunction& fn) {
        const char* name = fn.name();
        const char* overload = fn.overload_name();
        // The plans this thread used last, by their name's address: no lock for a model's
        // few dozen ops. A plan is never freed (retired_), so a slot names a live one; a
        // slot of another op at a reused address fails the match.
        thread_local std::array<std::pair<const char*, const SchemaPlan*>, 64> recent{};
        auto& slot = recent[(reinterpret_cast<uintptr_t>(name) >> 4) % recent.size()];
        if (slot.first == name && matches(*slot.second, name, overload)) return slot.second;
        const SchemaPlan* plan = lookup(fn, name, overload);
        if (plan != nullptr) slot = {name, plan};
        return plan;
    }

   private:
    const SchemaPlan* lookup(const at::RecordFunction& fn, const char* name, const char* overload) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = plans_.find(name);
            if (it != plans_.end() && matches(*it->second, name, overload)) return it->second.get();
        }
        auto schema = fn.operator_schema();
        if (!schema.has_value()) return nullptr;
        auto plan = make_plan(*schema);
        std::lock_guard<std::mutex> lock(mutex_);
        auto& slot = plans_[name];
        if (slot == nullptr || !matches(*slot, name, overload)) {
            if (slot != nullptr) retired_.push_back(std::move(slot));  // a racing reader may hold it
            slot = std::move(plan);
        }
        return slot.get();
    }

    static bool matches(const SchemaPlan& plan, const char* name, const char* overload) {
        size_t n = std::strlen(name);
        return plan.name.compare(0, n, name) == 0 && plan.overload == overload &&
               plan.name.size() == n + (plan.overload.empty() ? 0 : plan.overload.size() + 1);
    }

    std::mutex mutex_;
    std::unordered_map<const char*, std::unique_ptr<SchemaPlan>> plans_;
    std::vector<std::unique_ptr<SchemaPlan>> retired_;
};

}  // namespace streamrace
