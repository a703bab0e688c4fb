// text_data.h — text as training data (docs/spec.md "Text data"): a file's tokens, its vocabulary,
// and the windows that become the two inputs, tokens x [rows, T] and next-token targets y [rows, T].
//
// Tokens: "chars" — each UTF-8 code point (malformed UTF-8 is refused, located by line); "words" —
// the maximal runs of non-blank bytes (blanks: space, \t, \n, \v, \f, \r), so the line structure
// is not a token. The vocabulary is the file's distinct tokens sorted byte-wise (ids 0..V-1).
//
// Windows: L tokens t[0..L) give n = floor((L-1)/T) rows; row r is x = t[rT .. rT+T) and
// y = t[rT+1 .. rT+T+1) (non-overlapping x windows; the tail that fills no window is dropped).
// Validation split by position: the last floor(validation·n) rows are the validation rows, the
// others training, both in file order (no window is drawn from both parts).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spec/dataset.h"
#include "spec/spec.h"

namespace gr {

struct TextTokens {
  std::vector<std::string> tokens;
  std::vector<int64_t> lines;  // each token's line (1-based), for messages
};
// `file` names the text in messages (InputError at "line N").
TextTokens split_tokens(const std::string& text, const std::string& kind, const std::string& file);

Vocab build_vocab(const std::string& kind, int64_t context, const std::vector<std::string>& tokens);
// Ids of the tokens; a token not in the vocabulary is an InputError at `file`, "line N" (the
// place of token i is lines[i]); `what` says what the text is ("prompt", "data").
std::vector<int64_t> encode_tokens(const Vocab& vocab, const TextTokens& t, const std::string& file);
// A token's id, -1 when it is not in the vocabulary.
int64_t token_id(const Vocab& vocab, const std::string& token);
// The text of ids: chars concatenated; words joined by single spaces.
std::string decode_tokens(const Vocab& vocab, const std::vector<int64_t>& ids);
// A token as messages and CSV headers show it: JSON string escapes without the quotes ("\n").
std::string token_label(const std::string& token);

// Rows r in [begin, end) of the windows of `ids` as a table {x_name: [rows, T], y_name: [rows, T]}.
int64_t window_count(int64_t tokens, int64_t context);
DataTable text_windows(const std::vector<int64_t>& ids, int64_t context, int64_t begin, int64_t end,
                       const std::string& x_name, const std::string& y_name);

// The spec's text data: tokens, vocabulary, windows and the positional split (the fit of both
// inputs is the identity; no statistics).
Datasets load_text_datasets(const Spec& spec);
// The windows of another text file read with a trained vocabulary (evaluate --data FILE.txt): all
// rows, no split.
DataTable read_text_windows(const Spec& spec, const Vocab& vocab, const std::string& file);

// vocab.json: {"kind": "chars", "context": T, "tokens": [...]} (and back; InputError at `file`).
std::string vocab_json(const Vocab& vocab);
Vocab vocab_from_json(const std::string& text, const std::string& file);

}  // namespace gr
