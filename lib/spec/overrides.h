// overrides.h — `--set PATH=VALUE`: edits applied to a spec's JSON text before it is parsed and
// hashed, so a run with overrides is exactly the run of the edited file (docs/cli.md).
//
// PATH is a JSON pointer ("/optimizer/lr") or dotted ("optimizer.lr", "graph.0.op": a number
// indexes an array). Missing object keys along the way are created; an array index must exist.
// VALUE is parsed as JSON when it parses (numbers, true/false, null, arrays, objects, "quoted
// strings"), else taken as a plain string.
#pragma once
#include <string>
#include <vector>

#include "spec/spec.h"

namespace gr {

// The spec text with every override applied, in order (the text unchanged when `sets` is empty).
// Throws InputError(file, "--set ITEM", what) for a malformed item or a path that cannot be set.
std::string apply_overrides(const std::string& json_text, const std::vector<std::string>& sets,
                            const std::string& file);

// load_spec with overrides: reads the file, applies them, parses the result. An error located at
// or under an overridden value names the override: "<file>: --set optimizer.lr=abc: /optimizer/lr: ...".
Spec load_spec(const std::string& path, const std::vector<std::string>& sets);

// The JSON pointer an override's PATH denotes ("optimizer.lr" → "/optimizer/lr").
std::string override_pointer(const std::string& path);

}  // namespace gr
