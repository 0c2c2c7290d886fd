// A capture graph's nodes read straight from the driver (dlsym'd: no CUDA headers): the C++
// twin of streamrace/record/graph_readback.py for the two reads done at every capture's end
// and every catch-up, where a Python call per node would cost more than the capture itself.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace streamrace {

// CUgraphNodeType by value, named as the trace names them (graph_readback._NODE_TYPES).
inline const char* node_type_name(int type) {
    static const char* names[] = {"kernel",     "memcpy",      "memset",
                                  "host",       "graph",       "empty",
                                  "waitevent",  "eventrecord", "extsemaphoresignal",
                                  "extsemaphorewait", "memalloc", "memfree",
                                  "batchmemop", "conditional"};
    return type >= 0 && type < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[type] : "unknown";
}

class GraphNodes {
   public:
    static GraphNodes& driver() {
        static GraphNodes nodes;
        return nodes;
    }

    bool available() const { return get_nodes_ != nullptr && node_type_ != nullptr; }

    // Every node of the graph, in creation order.
    std::vector<int64_t> handles(int64_t graph) const {
        std::vector<int64_t> out;
        if (!available()) return out;
        size_t count = 0;
        if (get_nodes_(reinterpret_cast<void*>(graph), nullptr, &count) != 0) return out;
        std::vector<void*> nodes(count);
        if (count == 0 || get_nodes_(reinterpret_cast<void*>(graph), nodes.data(), &count) != 0) return out;
        out.reserve(count);
        for (size_t i = 0; i < count; ++i) out.push_back(reinterpret_cast<int64_t>(nodes[i]));
        return out;
    }

    int type(int64_t node) const {
        int type = -1;
        if (node_type_ == nullptr || node_type_(reinterpret_cast<void*>(node), &type) != 0) return -1;
        return type;
    }

    // The kernel's function name, empty when the driver cannot tell.
    std::string kernel_name(int64_t node) const {
        KernelNodeParams params{};
        if (kernel_params_ == nullptr || kernel_params_(reinterpret_cast<void*>(node), &params) != 0) return {};
        const char* name = nullptr;
        if (params.func != nullptr && func_name_ != nullptr) {
            if (func_name_(&name, params.func) != 0) name = nullptr;
        } else if (params.kern != nullptr && kernel_name_ != nullptr) {
            if (kernel_name_(&name, params.kern) != 0) name = nullptr;
        }
        return name != nullptr ? std::string(name).substr(0, 200) : std::string();
    }

   private:
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

    GraphNodes() {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (lib == nullptr) return;
        get_nodes_ = reinterpret_cast<int (*)(void*, void**, size_t*)>(dlsym(lib, "cuGraphGetNodes"));
        node_type_ = reinterpret_cast<int (*)(void*, int*)>(dlsym(lib, "cuGraphNodeGetType"));
        kernel_params_ =
            reinterpret_cast<int (*)(void*, KernelNodeParams*)>(dlsym(lib, "cuGraphKernelNodeGetParams_v2"));
        func_name_ = reinterpret_cast<int (*)(const char**, void*)>(dlsym(lib, "cuFuncGetName"));
        kernel_name_ = reinterpret_cast<int (*)(const char**, void*)>(dlsym(lib, "cuKernelGetName"));
    }

    int (*get_nodes_)(void*, void**, size_t*) = nullptr;
    int (*node_type_)(void*, int*) = nullptr;
    int (*kernel_params_)(void*, KernelNodeParams*) = nullptr;
    int (*func_name_)(const char**, void*) = nullptr;
    int (*kernel_name_)(const char**, void*) = nullptr;
};

}  // namespace streamrace
