#!/bin/sh
# Makes the man page dyni(8) from docs/dyni.8.md, whose "@README:Title@" lines
# stand for that "### Title" section of README.md, up to the next heading or
# a "<!-- end of dyni(8) -->" line: the README is the one source of what
# both say. Tables become definition lists (man's .TP); code blocks are kept.
# "@SYNOPSIS:Title@" stands for the commands named in the first column of
# that section's table, one a line, flags in bold and VALUES in italics (a
# test checks that the table names every flag dyni takes: CliArgs.*).
#   manpage.sh SOURCE_DIR VERSION OUT   (needs go-md2man)
set -eu
src=$1 version=$2 out=$3
awk -v readme="$src/README.md" -v version="$version" '
  function section(title,    line, inside, n) {
    inside = 0; fence = 0
    while ((getline line < readme) > 0) {
      if (line ~ /^```/) fence = !fence
      if (inside && line ~ /^<!-- end of dyni\(8\) -->/) break
      if (!fence && line ~ /^#/) {
        if (inside) break
        if (line == "### " title) { inside = 1; n++; continue }
      }
      if (!inside) continue
      if (line ~ /^\|[-| ]*$/) continue                   # a table rule
      if (line ~ /^\| / && !seen_header[title]++) continue  # the header row
      if (line ~ /^\| /) {                                  # "| term | text |"
        sub(/^\| /, "", line); sub(/ \|$/, "", line)
        at = index(line, " | ")
        print substr(line, 1, at - 1); print ": " substr(line, at + 3); print ""
        continue
      }
      print line
    }
    close(readme)
    if (!n) { print "manpage.sh: no section \"### " title "\" in " readme > "/dev/stderr"; exit 1 }
  }
  # "-profile=PID" -> **-profile=**_PID_, "[-json]" -> [**-json**], "ADDR..." -> _ADDR_...
  function synopsis_word(w,    lb, rb, at) {
    lb = ""; rb = ""
    if (w ~ /^\[/) { lb = "["; w = substr(w, 2) }
    if (w ~ /\]$/) { rb = "]"; w = substr(w, 1, length(w) - 1) }
    if (w ~ /^[A-Z]+(\.\.\.)?$/) { sub(/^[A-Z]+/, "_&_", w); return lb w rb }
    at = index(w, "=")
    if (at && substr(w, at + 1) ~ /^[A-Z]+$/) return lb "**" substr(w, 1, at) "**_" substr(w, at + 1) "_" rb
    return lb "**" w "**" rb
  }
  function synopsis(title,    line, inside, fence, cell, cmds, n, i, words, k, out, w) {
    inside = 0; fence = 0; n = 0
    while ((getline line < readme) > 0) {
      if (line ~ /^```/) fence = !fence
      if (!fence && line ~ /^#/) {
        if (inside) break
        if (line == "### " title) inside = 1
        continue
      }
      if (!inside || line !~ /^\| `/) continue
      cell = substr(line, 3); cell = substr(cell, 1, index(cell, " | ") - 1)
      gsub(/`, `/, "\n", cell); gsub(/`/, "", cell)
      k = split(cell, cmds, "\n")
      for (i = 1; i <= k; i++) {
        split(cmds[i], words, " "); out = ""
        for (w = 1; w in words; w++) out = out (w > 1 ? " " : "") synopsis_word(words[w])
        print out; print ""; n++
      }
    }
    close(readme)
    if (!n) { print "manpage.sh: no commands in \"### " title "\" of " readme > "/dev/stderr"; exit 1 }
  }
  /^@SYNOPSIS:.*@$/ { t = $0; sub(/^@SYNOPSIS:/, "", t); sub(/@$/, "", t); synopsis(t); next }
  /^@README:.*@$/ { t = $0; sub(/^@README:/, "", t); sub(/@$/, "", t); section(t); next }
  { gsub(/@VERSION@/, version); print }
' "$src/docs/dyni.8.md" > "$out.md"
go-md2man -in "$out.md" -out "$out"
rm -f "$out.md"
