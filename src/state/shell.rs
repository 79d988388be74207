//! Where a piece of a shell command sits: bare, inside double or single
//! quotes, in a comment or a here-document. A binding template in a command
//! becomes a variable reference written for its place (see
//! `template::ShellText`), so a binding's text is never read as shell code.
//! Pure functions.
//!
//! The scan follows bash's quoting closely enough for commands people write;
//! where it misjudges a place, the value still arrives through a variable, so
//! a misjudgement changes how the text looks (quotes shown, or split into
//! words), never what runs.

use std::ops::Range;

/// The quoting at a point of a shell command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quoting {
    /// Outside quotes (also inside `$(…)` or backticks).
    Bare,
    /// Inside `"…"`.
    Double,
    /// Inside `'…'`.
    Single,
    /// Inside `$'…'`.
    AnsiC,
    /// In a `#` comment.
    Comment,
    /// In a here-document body; `expands` when its delimiter is unquoted.
    HereDoc {
        /// Whether `$VAR` expands in this body.
        expands: bool,
    },
}

impl Quoting {
    /// Returns the text that reads variable `name` as one word here.
    pub fn reference(self, name: &str) -> String {
        match self {
            Quoting::Bare => format!("\"${{{name}}}\""),
            Quoting::Single => format!("'\"${{{name}}}\"'"),
            Quoting::AnsiC => format!("'\"${{{name}}}\"$'"),
            Quoting::Double | Quoting::Comment | Quoting::HereDoc { .. } => format!("${{{name}}}"),
        }
    }
}

#[derive(Debug, Clone)]
enum Frame {
    /// Shell code; ends at the end, at `)` (depth 0) or at a backtick.
    Code(Closer),
    Double,
    Single,
    AnsiC,
    Comment,
    HereDoc {
        delim: String,
        strip_tabs: bool,
        expands: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closer {
    End,
    Paren(u32),
    Backtick,
}

/// A here-document announced on the current line; its body starts after it.
#[derive(Debug, Clone)]
struct Pending {
    delim: String,
    strip_tabs: bool,
    expands: bool,
}

/// Returns the quoting at the start of each of `holes` (sorted, disjoint byte
/// ranges of `text`, each read as one opaque word).
pub fn quoting_at(text: &str, holes: &[Range<usize>]) -> Vec<Quoting> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        stack: vec![Frame::Code(Closer::End)],
        pending: Vec::new(),
        prev: b'\n',
    };
    let mut out = Vec::with_capacity(holes.len());
    let mut i = 0;
    let mut holes = holes.iter().peekable();
    while i < text.len() {
        if let Some(hole) = holes.next_if(|h| h.start <= i) {
            out.push(scan.quoting());
            i = hole.end.max(i + 1);
            scan.prev = b'x';
            continue;
        }
        i = scan.step(i);
    }
    // Holes at the very end (or past a malformed range) still get an answer.
    out.extend(holes.map(|_| scan.quoting()));
    out
}

struct Scan<'a> {
    bytes: &'a [u8],
    stack: Vec<Frame>,
    pending: Vec<Pending>,
    prev: u8,
}

impl Scan<'_> {
    fn quoting(&self) -> Quoting {
        match self.stack.last() {
            Some(Frame::Double) => Quoting::Double,
            Some(Frame::Single) => Quoting::Single,
            Some(Frame::AnsiC) => Quoting::AnsiC,
            Some(Frame::Comment) => Quoting::Comment,
            Some(Frame::HereDoc { expands, .. }) => Quoting::HereDoc { expands: *expands },
            Some(Frame::Code(_)) | None => Quoting::Bare,
        }
    }

    fn at(&self, i: usize) -> u8 {
        self.bytes.get(i).copied().unwrap_or(0)
    }

    /// Reads the byte(s) at `i` and returns where to read next.
    fn step(&mut self, i: usize) -> usize {
        let c = self.bytes[i];
        let next = match self.stack.last().cloned() {
            Some(Frame::Code(closer)) => self.code(i, closer),
            Some(Frame::Double) => match c {
                b'\\' => i + 2,
                b'"' => self.pop(i + 1),
                b'$' if self.at(i + 1) == b'(' => self.push(Frame::Code(Closer::Paren(0)), i + 2),
                b'`' => self.push(Frame::Code(Closer::Backtick), i + 1),
                _ => i + 1,
            },
            Some(Frame::Single) => match c {
                b'\'' => self.pop(i + 1),
                _ => i + 1,
            },
            Some(Frame::AnsiC) => match c {
                b'\\' => i + 2,
                b'\'' => self.pop(i + 1),
                _ => i + 1,
            },
            // The newline itself is read as code: it may start a here-document.
            Some(Frame::Comment) if c == b'\n' => self.pop(i),
            Some(Frame::Comment) => i + 1,
            Some(Frame::HereDoc {
                delim,
                strip_tabs,
                expands,
            }) => self.heredoc(i, &delim, strip_tabs, expands),
            None => i + 1,
        };
        if next > i {
            self.prev = self.bytes[next.min(self.bytes.len()) - 1];
        }
        next
    }

    fn push(&mut self, frame: Frame, next: usize) -> usize {
        self.stack.push(frame);
        next
    }

    fn pop(&mut self, next: usize) -> usize {
        if self.stack.len() > 1 {
            self.stack.pop();
        }
        next
    }

    fn code(&mut self, i: usize, closer: Closer) -> usize {
        let c = self.bytes[i];
        let word_start = self.prev.is_ascii_whitespace() || b";&|()<>".contains(&self.prev);
        match c {
            b'\\' => i + 2,
            b'\'' => self.push(Frame::Single, i + 1),
            b'"' => self.push(Frame::Double, i + 1),
            b'$' if self.at(i + 1) == b'\'' => self.push(Frame::AnsiC, i + 2),
            b'$' if self.at(i + 1) == b'(' => self.push(Frame::Code(Closer::Paren(0)), i + 2),
            b'`' if closer == Closer::Backtick => self.pop(i + 1),
            b'`' => self.push(Frame::Code(Closer::Backtick), i + 1),
            b'#' if word_start => self.push(Frame::Comment, i + 1),
            b'(' | b')' => {
                if let (Closer::Paren(depth), Some(top)) = (closer, self.stack.last_mut()) {
                    match (c, depth) {
                        (b')', 0) => return self.pop(i + 1),
                        (b')', d) => *top = Frame::Code(Closer::Paren(d - 1)),
                        (_, d) => *top = Frame::Code(Closer::Paren(d + 1)),
                    }
                }
                i + 1
            }
            b'<' if self.at(i + 1) == b'<' && self.at(i + 2) != b'<' => self.announce(i + 2),
            b'\n' => {
                // Bodies of the here-documents announced on this line follow it.
                for p in std::mem::take(&mut self.pending).into_iter().rev() {
                    self.stack.push(Frame::HereDoc {
                        delim: p.delim,
                        strip_tabs: p.strip_tabs,
                        expands: p.expands,
                    });
                }
                i + 1
            }
            _ => i + 1,
        }
    }

    /// Reads a here-document operator's delimiter word after `<<` at `i`.
    fn announce(&mut self, mut i: usize) -> usize {
        let strip_tabs = self.at(i) == b'-';
        if strip_tabs {
            i += 1;
        }
        while matches!(self.at(i), b' ' | b'\t') {
            i += 1;
        }
        let mut delim = Vec::new();
        let mut expands = true;
        let mut quote = None;
        while i < self.bytes.len() {
            let c = self.bytes[i];
            match (quote, c) {
                (None, b'\'' | b'"') => {
                    quote = Some(c);
                    expands = false;
                }
                (Some(q), _) if c == q => quote = None,
                (None, b'\\') => {
                    expands = false;
                    i += 1;
                    if let Some(&escaped) = self.bytes.get(i) {
                        delim.push(escaped);
                    }
                }
                (None, _) if c.is_ascii_whitespace() || b";&|<>()".contains(&c) => break,
                _ => delim.push(c),
            }
            i += 1;
        }
        if !delim.is_empty() {
            self.pending.push(Pending {
                delim: String::from_utf8_lossy(&delim).into_owned(),
                strip_tabs,
                expands,
            });
        }
        i
    }

    /// Reads a here-document body at `i`: a line equal to the delimiter ends it.
    fn heredoc(&mut self, i: usize, delim: &str, strip_tabs: bool, expands: bool) -> usize {
        if self.prev == b'\n' {
            let end = self.bytes[i..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(self.bytes.len(), |p| i + p);
            let line = &self.bytes[i..end];
            let line = if strip_tabs {
                &line[line.iter().take_while(|&&b| b == b'\t').count()..]
            } else {
                line
            };
            if line == delim.as_bytes() {
                self.stack.pop();
                return end + 1;
            }
        }
        let c = self.bytes[i];
        match c {
            b'\\' if expands => i + 2,
            b'$' if expands && self.at(i + 1) == b'(' => self.push(Frame::Code(Closer::Paren(0)), i + 2),
            b'`' if expands => self.push(Frame::Code(Closer::Backtick), i + 1),
            _ => i + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quoting at each `@` of `text`.
    fn at_marks(text: &str) -> Vec<Quoting> {
        let holes: Vec<Range<usize>> = text.match_indices('@').map(|(i, _)| i..i + 1).collect();
        quoting_at(text, &holes)
    }

    #[test]
    fn quotes_are_followed() {
        use Quoting::*;
        assert_eq!(
            at_marks("echo @ \"@\" '@' $'@' \\\"@"),
            [Bare, Double, Single, AnsiC, Bare]
        );
        assert_eq!(at_marks("echo \"a 'b' @\" 'x \" @'"), [Double, Single]);
        assert_eq!(at_marks("echo \"a \\\" @\" $'it\\'s @'"), [Double, AnsiC]);
    }

    #[test]
    fn substitutions_reset_the_quoting() {
        use Quoting::*;
        assert_eq!(
            at_marks("echo \"$(printf '%s' @) @\" `echo @` \"`echo @`\""),
            [Bare, Double, Bare, Bare]
        );
        assert_eq!(at_marks("echo $(( (1+2) )) @ \"$(echo \"@\")\""), [Bare, Double]);
    }

    #[test]
    fn comments_start_only_at_a_word() {
        use Quoting::*;
        assert_eq!(at_marks("echo a#b @ # note @\necho @"), [Bare, Comment, Bare]);
        assert_eq!(at_marks("echo ${#x} @"), [Bare]);
    }

    #[test]
    fn here_documents_are_followed() {
        use Quoting::*;
        let text = "cat <<EOF; cat <<-'END'\nbody @\nEOF\n\tquoted @\n\tEND\necho @ <<< @";
        assert_eq!(
            at_marks(text),
            [HereDoc { expands: true }, HereDoc { expands: false }, Bare, Bare]
        );
        assert_eq!(at_marks("cat <<\"E\"\n@\nE\n'@'"), [HereDoc { expands: false }, Single]);
    }

    #[test]
    fn unbalanced_text_still_answers() {
        use Quoting::*;
        assert_eq!(at_marks("echo \"open @"), [Double]);
        assert_eq!(at_marks("echo ) ) @ \\"), [Bare]);
        let past_the_end = [2..4, 5..7];
        assert_eq!(quoting_at("ab", &past_the_end), [Bare, Bare]);
    }
}
