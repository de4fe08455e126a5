//! A small glob matcher for the tailer's include/exclude patterns (no dependency).
//!
//! Syntax, per path component (`/` separated): `*` any run of bytes, `?` one byte, `[abc]`,
//! `[a-z]`, `[!x]` classes (an unclosed `[` is literal), and a whole component `**` for zero or
//! more directories. Matching is on raw bytes, so non-UTF-8 names work. Expansion walks only
//! below the pattern's literal prefix and does not follow symlinked directories for `**`.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Deepest directory recursion for `**`.
const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Literal(Vec<u8>),
    Wild(Vec<u8>),
    AnyDirs,
}

/// A compiled glob pattern.
#[derive(Debug, Clone)]
pub(crate) struct Pattern {
    absolute: bool,
    segs: Vec<Seg>,
}

fn has_meta(s: &[u8]) -> bool {
    s.iter().any(|b| matches!(b, b'*' | b'?' | b'['))
}

fn split(bytes: &[u8]) -> (bool, Vec<&[u8]>) {
    let absolute = bytes.first() == Some(&b'/');
    let parts = bytes
        .split(|&b| b == b'/')
        .filter(|s| !s.is_empty() && *s != b".")
        .collect();
    (absolute, parts)
}

impl Pattern {
    /// Compile a pattern. Never fails: anything that is not valid glob syntax is literal.
    pub(crate) fn new(pattern: &str) -> Self {
        let (absolute, parts) = split(pattern.as_bytes());
        let segs = parts
            .into_iter()
            .map(|p| {
                if p == b"**" {
                    Seg::AnyDirs
                } else if has_meta(p) {
                    Seg::Wild(p.to_vec())
                } else {
                    Seg::Literal(p.to_vec())
                }
            })
            .collect();
        Pattern { absolute, segs }
    }

    /// Whether `path` matches. A pattern of a single component without `/` (e.g. `*.gz`) is
    /// matched against the file name only; others against the whole path as written.
    pub(crate) fn matches(&self, path: &Path) -> bool {
        if !self.absolute
            && self.segs.len() == 1
            && let Some(name) = path.file_name()
        {
            return match_segs(&self.segs, &[name.as_bytes()]);
        }
        let (absolute, parts) = split(path.as_os_str().as_bytes());
        absolute == self.absolute && match_segs(&self.segs, &parts)
    }

    /// Every regular file (symlinks followed) that matches, in no particular order; may hold
    /// duplicates when `**` overlaps.
    #[cfg(test)]
    pub(crate) fn expand(&self, out: &mut Vec<PathBuf>) {
        self.expand_checked(out, &mut Vec::new());
    }

    /// [`Pattern::expand`], collecting the directories that could not be listed (out of file
    /// descriptors, permission denied): the result is then incomplete, and a file missing from
    /// it is not a file that went away.
    pub(crate) fn expand_checked(
        &self,
        out: &mut Vec<PathBuf>,
        errors: &mut Vec<(PathBuf, std::io::Error)>,
    ) {
        let (root, i) = self.root();
        walk(&root, &self.segs[i..], out, errors, 0);
    }

    /// The directory named by the pattern's literal prefix (where expansion starts; `""` is
    /// the current directory), and how many components that prefix has.
    pub(crate) fn root(&self) -> (PathBuf, usize) {
        let mut root = if self.absolute {
            PathBuf::from("/")
        } else {
            PathBuf::new()
        };
        let mut i = 0;
        while let Some(Seg::Literal(name)) = self.segs.get(i) {
            if i + 1 == self.segs.len() {
                break;
            }
            root.push(OsStr::from_bytes(name));
            i += 1;
        }
        (root, i)
    }
}

fn dir_or_dot(dir: &Path) -> &Path {
    if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }
}

/// List a directory; a missing one is empty, any other failure is recorded.
fn list(dir: &Path, errors: &mut Vec<(PathBuf, std::io::Error)>) -> Option<fs::ReadDir> {
    match fs::read_dir(dir_or_dot(dir)) {
        Ok(entries) => Some(entries),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => None,
        Err(e) => {
            errors.push((dir.to_path_buf(), e));
            None
        }
    }
}

type Errors = Vec<(PathBuf, std::io::Error)>;

fn walk(dir: &Path, segs: &[Seg], out: &mut Vec<PathBuf>, errors: &mut Errors, depth: usize) {
    let Some((first, rest)) = segs.split_first() else {
        return;
    };
    match first {
        Seg::Literal(name) => {
            let p = dir.join(OsStr::from_bytes(name));
            visit(p, rest, out, errors, depth);
        }
        Seg::Wild(pat) => {
            let Some(entries) = list(dir, errors) else {
                return;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                if wild_match(pat, name.as_bytes()) {
                    visit(dir.join(&name), rest, out, errors, depth);
                }
            }
        }
        Seg::AnyDirs => {
            walk(dir, rest, out, errors, depth);
            if depth >= MAX_DEPTH {
                return;
            }
            let Some(entries) = list(dir, errors) else {
                return;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&dir.join(entry.file_name()), segs, out, errors, depth + 1);
                }
            }
        }
    }
}

fn visit(p: PathBuf, rest: &[Seg], out: &mut Vec<PathBuf>, errors: &mut Errors, depth: usize) {
    if rest.is_empty() {
        if fs::metadata(&p).is_ok_and(|m| m.is_file()) {
            out.push(p);
        }
    } else if fs::metadata(&p).is_ok_and(|m| m.is_dir()) {
        walk(&p, rest, out, errors, depth);
    }
}

fn match_segs(segs: &[Seg], parts: &[&[u8]]) -> bool {
    match segs.split_first() {
        None => parts.is_empty(),
        Some((Seg::AnyDirs, rest)) => (0..=parts.len()).any(|k| match_segs(rest, &parts[k..])),
        Some((seg, rest)) => match parts.split_first() {
            None => false,
            Some((part, more)) => {
                let ok = match seg {
                    Seg::Literal(l) => l.as_slice() == *part,
                    Seg::Wild(w) => wild_match(w, part),
                    Seg::AnyDirs => false,
                };
                ok && match_segs(rest, more)
            }
        },
    }
}

/// Parse a class starting just after `[`; returns (matches `c`, index after `]`), or `None`
/// when the class is not closed (then `[` is literal).
fn class(pat: &[u8], start: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = start;
    let negate = matches!(pat.get(i), Some(b'!') | Some(b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let b = *pat.get(i)?;
        if b == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if pat.get(i + 1) == Some(&b'-')
            && let Some(&hi) = pat.get(i + 2)
            && hi != b']'
        {
            if (b..=hi).contains(&c) {
                hit = true;
            }
            i += 3;
        } else {
            if b == c {
                hit = true;
            }
            i += 1;
        }
    }
}

/// Match one component: `*`, `?`, classes; everything else literal.
pub(crate) fn wild_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        let c = s[i];
        match pat.get(p) {
            Some(b'*') => {
                star = Some((p, i));
                p += 1;
                continue;
            }
            Some(b'?') => {
                p += 1;
                i += 1;
                continue;
            }
            Some(b'[') => {
                if let Some((ok, next)) = class(pat, p + 1, c) {
                    if ok {
                        p = next;
                        i += 1;
                        continue;
                    }
                } else if c == b'[' {
                    p += 1;
                    i += 1;
                    continue;
                }
            }
            Some(&b) if b == c => {
                p += 1;
                i += 1;
                continue;
            }
            _ => {}
        }
        // Mismatch: let the last `*` eat one more byte, or fail.
        match star {
            Some((sp, si)) => {
                p = sp + 1;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pat[p.min(pat.len())..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_wildcards() {
        assert!(wild_match(b"*.log", b"app.log"));
        assert!(!wild_match(b"*.log", b"app.log.1"));
        assert!(wild_match(b"app.log*", b"app.log.1"));
        assert!(wild_match(b"a?c", b"abc"));
        assert!(wild_match(b"[ab]*", b"b1"));
        assert!(!wild_match(b"[!ab]*", b"b1"));
        assert!(wild_match(b"x[0-9]", b"x7"));
        assert!(wild_match(b"[", b"["));
        assert!(wild_match(b"*a*b*", b"zzazzbzz"));
        assert!(!wild_match(b"*a*b", b"zzazzbzz"));
        assert!(wild_match(b"", b""));
        assert!(wild_match(b"*", b""));
    }

    #[test]
    fn whole_path_and_name_only() {
        let p = Pattern::new("/var/log/**/*.log");
        assert!(p.matches(Path::new("/var/log/a.log")));
        assert!(p.matches(Path::new("/var/log/x/y/a.log")));
        assert!(!p.matches(Path::new("/var/log/a.log.1")));
        assert!(!p.matches(Path::new("var/log/a.log")));
        let n = Pattern::new("*.gz");
        assert!(n.matches(Path::new("/var/log/a.log.gz")));
        assert!(!n.matches(Path::new("/var/log/a.log")));
    }

    #[test]
    fn expand_walks_only_matching_dirs() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("a/b")).unwrap();
        for f in ["x.log", "a/y.log", "a/b/z.log", "a/b/z.txt"] {
            fs::write(d.path().join(f), b"").unwrap();
        }
        let mut out = Vec::new();
        Pattern::new(&format!("{}/**/*.log", d.path().display())).expand(&mut out);
        out.sort();
        let rel: Vec<_> = out
            .iter()
            .map(|p| p.strip_prefix(d.path()).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            rel,
            vec![
                PathBuf::from("a/b/z.log"),
                PathBuf::from("a/y.log"),
                PathBuf::from("x.log")
            ]
        );
        let mut lit = Vec::new();
        Pattern::new(&format!("{}/x.log", d.path().display())).expand(&mut lit);
        assert_eq!(lit, vec![d.path().join("x.log")]);
    }
}
