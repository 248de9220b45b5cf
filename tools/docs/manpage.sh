#!/bin/sh
# Makes the man page dyni(8) from docs/dyni.8.md, whose "@README:Title@" lines
# stand for that "### Title" section of README.md, up to the next heading or
# a "<!-- end of dyni(8) -->" line: the README is the one source of what
# both say. Tables become definition lists (man's .TP); code blocks are kept.
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
  /^@README:.*@$/ { t = $0; sub(/^@README:/, "", t); sub(/@$/, "", t); section(t); next }
  { gsub(/@VERSION@/, version); print }
' "$src/docs/dyni.8.md" > "$out.md"
go-md2man -in "$out.md" -out "$out"
rm -f "$out.md"
