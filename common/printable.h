// Text that messages quote from untrusted input (a config line, a process's
// name): is it UTF-8, and how to show it without writing raw control bytes
// to a terminal.
#pragma once

#include <string>

namespace dyni {

bool valid_utf8(const std::string& s);
// A C0 control character or DEL.
bool is_control(char c);
// `s` with control bytes, and all non-ASCII bytes of text that is not UTF-8,
// written as \xNN.
std::string printable(const std::string& s);
// `s` as one line of a file that is read line by line (a name in a perf map):
// each control byte becomes '?'.
std::string one_line(std::string s);

}  // namespace dyni
