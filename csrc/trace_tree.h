// A trace line parsed into C++ values, for the direct reader (core.cpp's run_lines): the C++
// core reads an event's fields from here, and no Python object is made for it unless a
// finding names it (then from its held copy, held_event.h).
//
// It takes a subset of what trace_json.h takes, never more: the same grammar (objects,
// arrays, strings without escapes, integers of at most 18 digits, true, false, null, nested at
// most MAX_DEPTH deep, JSON's whitespace), with strings of printable ASCII only. Anything
// else gives up, and the line goes the way it went before (trace_json.h, then Python), so a
// line taken here means what it means there: the same values in the same order.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "held_event.h"

namespace streamrace::trace_tree {

using i64 = long long;

constexpr int MAX_DEPTH = 64;  // trace_json.h's
constexpr int MAX_DIGITS = 18;

enum class Kind : unsigned char { NUL, FALSE, TRUE, INT, STR, LIST, DICT };

// One value. A list's or dict's items follow it, in order, each with its own items after it;
// a dict's items alternate key (a STR) and value. `end` is the index just past the value's
// last item, so the next sibling is nodes[end].
struct Node {
    Kind kind;
    unsigned size = 0;  // a list's items, a dict's pairs, a string's bytes
    unsigned end = 0;
    i64 value = 0;               // an INT's; a dict key's id in held::KeyTable, or -1 (none)
    const char* text = nullptr;  // a STR's bytes, in the line
    std::string_view str() const { return {text, size}; }
};

// A key as the tree looks it up: its id in held::KeyTable (-1: it has none, so its text is
// compared), made once where the key is named.
struct Key {
    int id;
    std::string_view text;
    explicit Key(std::string_view name) : id(held::KeyTable::shared().id(name)), text(name) {
        if (id == held::KeyTable::FAILED) {
            PyErr_Clear();
            id = -1;
        }
    }
    Key(int id, std::string_view text) : id(id), text(text) {}
    // The key node's (a dict's key) name is this key: ids compare where both have one, as
    // two names have the same id only if they are the same.
    bool names(const Node& key) const { return id >= 0 && key.value >= 0 ? key.value == id : key.str() == text; }
};

class Tree {
   public:
    // The line as a tree (the root, index 0, a dict); false: given up. The tree points into
    // the line, which must outlive its use.
    bool parse(const char* begin, const char* end) {
        if (nodes_.size() > KEPT_NODES) std::vector<Node>().swap(nodes_);  // a huge line's nodes go
        count_ = 0;
        ++line_;  // the root's keys of earlier lines are stale from here
        p_ = begin;
        end_ = end;
        skip_space();
        if (p_ == end_ || *p_ != '{' || !value(0)) return false;
        skip_space();
        return p_ == end_;
    }

    const Node& at(unsigned i) const { return nodes_[i]; }
    const Node& root() const { return nodes_[0]; }

    // The value under key in the dict at index `dict`, or null: absent. The root's keys with
    // an id are found by it (the checks ask the root for most of an event's fields, each a
    // scan of its keys before).
    const Node* get(unsigned dict, const Key& key) const {
        if (dict == 0 && key.id >= 0) return root_line_[key.id] == line_ ? &nodes_[root_key_[key.id] + 1] : nullptr;
        const Node& d = nodes_[dict];
        for (unsigned i = dict + 1; i < d.end; i = nodes_[i + 1].end)
            if (key.names(nodes_[i])) return &nodes_[i + 1];
        return nullptr;
    }
    unsigned index(const Node* node) const { return unsigned(node - nodes_.data()); }

    // The index of a list's or dict's first item (a dict's first key).
    static unsigned first(unsigned container) { return container + 1; }

    // The event's held copy (held_event.h's encoding, which the Python objects are made again
    // from): what held::Encoder writes for the objects trace_json.h would have made.
    void encode(held::Encoder& out) const { encode_node(out, 0); }

   private:
    void skip_space() {
        while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
    }

    // A new node, written in place (a Node built aside and copied in stalls on its store).
    unsigned add(Kind kind) {
        if (count_ == nodes_.size()) nodes_.resize(nodes_.empty() ? 256 : 2 * nodes_.size());
        Node& n = nodes_[count_];
        n.kind = kind;
        n.size = n.end = 0;
        n.value = 0;
        n.text = nullptr;
        return count_++;
    }

    bool value(int depth) {
        if (p_ == end_) return false;
        switch (*p_) {
            case '{':
                return depth < MAX_DEPTH && object(depth + 1);
            case '[':
                return depth < MAX_DEPTH && array(depth + 1);
            case '"':
                return string<false>();
            case 't':
                return word("true", 4, Kind::TRUE);
            case 'f':
                return word("false", 5, Kind::FALSE);
            case 'n':
                return word("null", 4, Kind::NUL);
            default:
                return integer();
        }
    }

    bool word(const char* text, size_t n, Kind kind) {
        if (size_t(end_ - p_) < n || std::memcmp(p_, text, n) != 0) return false;
        p_ += n;
        const unsigned at = add(kind);  // before count_ is read: it moves on
        nodes_[at].end = count_;
        return true;
    }

    bool object(int depth) {
        ++p_;  // '{'
        const unsigned at = add(Kind::DICT);
        unsigned pairs = 0;
        unsigned long long seen[4] = {0, 0, 0, 0};  // the ids of its keys so far (below 256)
        skip_space();
        if (p_ != end_ && *p_ == '}') {
            ++p_;
        } else {
            for (;;) {
                skip_space();
                if (p_ == end_ || *p_ != '"') return false;
                const unsigned key = count_;
                if (!string<true>() || !name(nodes_[key])) return false;
                // A repeated key is Python's to read: by its id in a bit set, else by its text.
                const int id = int(nodes_[key].value);
                if (id >= 0) {
                    const unsigned long long bit = 1ull << (id & 63);
                    if (seen[id >> 6] & bit) return false;
                    seen[id >> 6] |= bit;
                    if (at == 0) {
                        root_key_[id] = key;
                        root_line_[id] = line_;
                    }
                } else {
                    const Key named(id, nodes_[key].str());
                    for (unsigned i = at + 1; i < key; i = nodes_[i + 1].end)
                        if (named.names(nodes_[i])) return false;
                }
                skip_space();
                if (p_ == end_ || *p_ != ':') return false;
                ++p_;
                skip_space();
                if (!value(depth)) return false;
                ++pairs;
                bool closed;
                if (!next('}', closed)) return false;
                if (closed) break;
            }
        }
        nodes_[at].size = pairs;
        nodes_[at].end = count_;
        return true;
    }

    // After an object's pair or an array's item: a comma (another follows) or the closing
    // bracket (`closed`); false for anything else.
    bool next(char close, bool& closed) {
        skip_space();
        if (p_ == end_ || (*p_ != ',' && *p_ != close)) return false;
        closed = *p_++ == close;
        return true;
    }

    bool array(int depth) {
        ++p_;  // '['
        const unsigned at = add(Kind::LIST);
        unsigned items = 0;
        skip_space();
        if (p_ != end_ && *p_ == ']') {
            ++p_;
        } else {
            for (;;) {
                skip_space();
                if (!value(depth)) return false;
                ++items;
                bool closed;
                if (!next(']', closed)) return false;
                if (closed) break;
            }
        }
        nodes_[at].size = items;
        nodes_[at].end = count_;
        return true;
    }

    // A string; a key's (IsKey) hashed on the way, for name().
    template <bool IsKey>
    bool string() {
        // p_ in a local: the loop's stores would otherwise keep it in memory.
        const char* p = p_ + 1;  // after '"'
        const char* const start = p;
        const char* const end = end_;
        unsigned long long hash = 0xcbf29ce484222325ull;  // FNV-1a
        for (; p != end && *p != '"'; ++p) {
            const unsigned char c = static_cast<unsigned char>(*p);
            if (c == '\\' || c < 0x20 || c >= 0x7f) return false;  // escapes, controls, beyond ASCII
            if constexpr (IsKey) hash = (hash ^ c) * 0x100000001b3ull;
        }
        if (p == end) return false;
        if constexpr (IsKey) hash_ = hash;
        Node& n = nodes_[add(Kind::STR)];
        n.text = start;
        n.size = unsigned(p - start);
        n.end = count_;
        p_ = p + 1;  // after '"'
        return true;
    }

    bool integer() {
        const char* p = p_;
        const bool negative = *p == '-';
        if (negative) ++p;
        const char* const digits = p;
        unsigned long long v = 0;  // wraps past 18 digits, harmlessly: such a line is given up
        for (; p != end_ && *p >= '0' && *p <= '9'; ++p) v = v * 10 + unsigned(*p - '0');
        const long count = p - digits;
        if (count == 0 || count > MAX_DIGITS || (*digits == '0' && count > 1)) return false;
        if (p != end_ && (*p == '.' || *p == 'e' || *p == 'E')) return false;  // a float
        p_ = p;
        Node& n = nodes_[add(Kind::INT)];
        n.value = negative ? -(long long)v : (long long)v;
        n.end = count_;
        return true;
    }

    // The key's id (held::KeyTable's, -1 where it has none) into its node; false on a Python
    // error (cleared) where its str could not be made. Keys repeat from line to line: a key
    // of up to 16 bytes is found again by its bytes, without hashing its text as a string.
    bool name(Node& key) {
        if (key.size > MAX_SLOT_KEY) return (key.value = lookup(key.str())) != held::KeyTable::FAILED || give_up();
        KeySlot& slot = keys_[(hash_ ^ (hash_ >> 29)) & (KEY_SLOTS - 1)];
        if (slot.hash == hash_ && slot.size == key.size && std::memcmp(slot.text, key.text, key.size) == 0) {
            key.value = slot.id;
            return true;
        }
        const int id = lookup(key.str());
        if (id == held::KeyTable::FAILED) return give_up();
        slot.hash = hash_;
        slot.size = key.size;
        std::memcpy(slot.text, key.text, key.size);
        slot.id = id;
        key.value = id;
        return true;
    }

    static int lookup(std::string_view text) { return held::KeyTable::shared().id(text); }
    static bool give_up() {  // the Python path will meet the error again
        PyErr_Clear();
        return false;
    }

    void encode_node(held::Encoder& out, unsigned i) const {
        const Node& n = nodes_[i];
        switch (n.kind) {
            case Kind::NUL:
                out.none();
                return;
            case Kind::FALSE:
            case Kind::TRUE:
                out.boolean(n.kind == Kind::TRUE);
                return;
            case Kind::INT:
                out.integer(n.value);
                return;
            case Kind::STR:
                out.ascii(n.text, n.size);
                return;
            case Kind::LIST:
                out.list(n.size);
                for (unsigned j = i + 1; j < n.end; j = nodes_[j].end) encode_node(out, j);
                return;
            case Kind::DICT:
                out.dict(n.size);
                for (unsigned j = i + 1; j < n.end; j = nodes_[j + 1].end) {
                    out.key(int(nodes_[j].value), nodes_[j].str());
                    encode_node(out, j + 1);
                }
                return;
        }
    }

    static constexpr size_t KEPT_NODES = size_t(1) << 16;  // 2 MB: kept from line to line
    static constexpr size_t KEY_SLOTS = 256;
    static constexpr unsigned MAX_SLOT_KEY = 24;  // longer keys are looked up by their text
    struct KeySlot {
        unsigned long long hash = 0;
        unsigned size = ~0u;  // none
        int id = -1;
        char text[MAX_SLOT_KEY];
    };
    // The root dict's keys by id (held::KeyTable's, below MAX_KEYS): the key node's index,
    // valid where it was set while parsing the current line (root_line_ == line_).
    static constexpr int ROOT_KEYS = held::KeyTable::MAX_KEYS;
    unsigned root_key_[ROOT_KEYS] = {};
    unsigned long long root_line_[ROOT_KEYS] = {};
    unsigned long long line_ = 0;  // lines parsed: the first is 1, so no key starts valid
    unsigned long long hash_ = 0;  // of the string read last
    KeySlot keys_[KEY_SLOTS];
    std::vector<Node> nodes_;  // the first count_ are the line's
    unsigned count_ = 0;
    const char* p_ = nullptr;
    const char* end_ = nullptr;
};

}  // namespace streamrace::trace_tree
