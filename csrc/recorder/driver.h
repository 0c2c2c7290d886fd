// The CUDA driver functions the capture path calls: looked up in libcuda (dlsym'd: no CUDA
// headers), or given by address (tests/fake_cuda.py's scripted capture, on the CPU). The C++
// twin of graph_readback.Driver, by the same symbol names, so one fake serves both sets of
// hooks.
#pragma once

#include <dlfcn.h>

#include <Python.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "python_error.h"

namespace streamrace {

struct KernelNodeParams {  // CUDA_KERNEL_NODE_PARAMS_v2
    void* func;
    unsigned grid[3];
    unsigned block[3];
    unsigned shared_mem_bytes;
    void** kernel_params;
    void** extra;
    void* kern;
    void* ctx;
};

struct EdgeData {  // CUgraphEdgeData
    unsigned char from_port;
    unsigned char to_port;
    unsigned char type;
    unsigned char reserved[5];
};

struct Driver {
    // cuStreamGetCaptureInfo_v2 is the CUDA 12 signature, which CUDA 13 drivers still export.
    using CaptureInfo = int (*)(void* stream, int* status, uint64_t* id, void** graph, void* const** deps,
                                size_t* count);
    using GetNodes = int (*)(void* graph, void** nodes, size_t* count);
    using NodeType = int (*)(void* node, int* type);
    using KernelParams = int (*)(void* node, KernelNodeParams* params);
    using Name = int (*)(const char** name, void* function);
    using Edges = int (*)(void* graph, void** from, void** to, EdgeData* data, size_t* count);
    using ParamInfo = int (*)(void* function, size_t index, size_t* offset, size_t* size);
    using NodeEvent = int (*)(void* node, void** event);
    using Dependencies = int (*)(void* node, void** deps, EdgeData* data, size_t* count);

    CaptureInfo capture_info = nullptr;
    GetNodes get_nodes = nullptr;
    NodeType node_type = nullptr;
    KernelParams kernel_params = nullptr;
    Name func_name = nullptr;
    Name kernel_name = nullptr;
    Edges edges = nullptr;
    NodeEvent record_node_event = nullptr;  // cuGraphEventRecordNodeGetEvent
    NodeEvent wait_node_event = nullptr;    // cuGraphEventWaitNodeGetEvent
    // Optional (CUDA 12.4 drivers on): without them a kernel node's parameters are read in
    // Python (streamrace/record/kernel_params.py).
    ParamInfo func_param_info = nullptr;
    ParamInfo kernel_param_info = nullptr;
    // Optional (CUDA 12.3 drivers on): without it a catch-up walks the whole graph
    // (unseen_launches.h).
    Dependencies node_dependencies = nullptr;  // cuGraphNodeGetDependencies_v2

    // The functions are Python's (tests/fake_cuda.py through ctypes), not libcuda's.
    bool scripted = false;

    // A call of one of the functions above. A scripted one is Python: it runs with the GIL
    // and with any Python error in flight put aside (an op unwinding through Python may reach
    // a hook with its error set, and Python called then fails with a SystemError the program
    // would see instead of its own exception). libcuda's are called as they are.
    template <typename Function, typename... Args>
    int call(Function function, Args... args) const {
        if (!scripted) return function(args...);
        PyGILState_STATE gil = PyGILState_Ensure();
        int result;
        {
            PythonErrorKept kept;
            result = function(args...);
        }
        PyGILState_Release(gil);
        return result;
    }

    // libcuda's, loaded once; a function the driver lacks stays null.
    static const Driver& libcuda() {
        static const Driver driver = [] {
            Driver d;
            void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
            if (lib == nullptr) return d;
            d.capture_info = reinterpret_cast<CaptureInfo>(dlsym(lib, "cuStreamGetCaptureInfo_v2"));
            d.get_nodes = reinterpret_cast<GetNodes>(dlsym(lib, "cuGraphGetNodes"));
            d.node_type = reinterpret_cast<NodeType>(dlsym(lib, "cuGraphNodeGetType"));
            d.kernel_params = reinterpret_cast<KernelParams>(dlsym(lib, "cuGraphKernelNodeGetParams_v2"));
            d.func_name = reinterpret_cast<Name>(dlsym(lib, "cuFuncGetName"));
            d.kernel_name = reinterpret_cast<Name>(dlsym(lib, "cuKernelGetName"));
            d.edges = reinterpret_cast<Edges>(dlsym(lib, "cuGraphGetEdges_v2"));
            d.record_node_event = reinterpret_cast<NodeEvent>(dlsym(lib, "cuGraphEventRecordNodeGetEvent"));
            d.wait_node_event = reinterpret_cast<NodeEvent>(dlsym(lib, "cuGraphEventWaitNodeGetEvent"));
            d.func_param_info = reinterpret_cast<ParamInfo>(dlsym(lib, "cuFuncGetParamInfo"));
            d.kernel_param_info = reinterpret_cast<ParamInfo>(dlsym(lib, "cuKernelGetParamInfo"));
            d.node_dependencies = reinterpret_cast<Dependencies>(dlsym(lib, "cuGraphNodeGetDependencies_v2"));
            return d;
        }();
        return driver;
    }

    // The functions at these addresses, by libcuda symbol name (every one must be given, but
    // the optional ones).
    static Driver at(const std::unordered_map<std::string, int64_t>& addresses) {
        auto address = [&](const char* symbol) {
            auto it = addresses.find(symbol);
            if (it == addresses.end() || it->second == 0) {
                throw std::invalid_argument(std::string("no address for the driver function ") + symbol);
            }
            return reinterpret_cast<void*>(it->second);
        };
        Driver d;
        d.scripted = true;
        d.capture_info = reinterpret_cast<CaptureInfo>(address("cuStreamGetCaptureInfo_v2"));
        d.get_nodes = reinterpret_cast<GetNodes>(address("cuGraphGetNodes"));
        d.node_type = reinterpret_cast<NodeType>(address("cuGraphNodeGetType"));
        d.kernel_params = reinterpret_cast<KernelParams>(address("cuGraphKernelNodeGetParams_v2"));
        d.func_name = reinterpret_cast<Name>(address("cuFuncGetName"));
        d.kernel_name = reinterpret_cast<Name>(address("cuKernelGetName"));
        d.edges = reinterpret_cast<Edges>(address("cuGraphGetEdges_v2"));
        d.record_node_event = reinterpret_cast<NodeEvent>(address("cuGraphEventRecordNodeGetEvent"));
        d.wait_node_event = reinterpret_cast<NodeEvent>(address("cuGraphEventWaitNodeGetEvent"));
        auto optional = [&](const char* symbol) {
            auto it = addresses.find(symbol);
            return it == addresses.end() ? nullptr : reinterpret_cast<void*>(it->second);
        };
        d.func_param_info = reinterpret_cast<ParamInfo>(optional("cuFuncGetParamInfo"));
        d.kernel_param_info = reinterpret_cast<ParamInfo>(optional("cuKernelGetParamInfo"));
        d.node_dependencies = reinterpret_cast<Dependencies>(optional("cuGraphNodeGetDependencies_v2"));
        return d;
    }
};

}  // namespace streamrace
