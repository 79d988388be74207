//! Mutations that reach deep into YAML and JSON lines: byte havoc, tokens
//! from a dictionary (YAML indicators, and every key the seeds use), whole
//! lines moved or re-indented, numbers swapped for edge values, chunks
//! spliced in from another input or repeated hundreds of times.

use rand::RngExt;
use rand::rngs::StdRng;

/// The longest input made; a mutation past it is cut.
pub const MAX_LEN: usize = 256 * 1024;

const TOKENS: &[&str] = &[
    ": ",
    "- ",
    "? ",
    "&a ",
    "*a",
    "<<: *a",
    "!!str ",
    "!!binary ",
    "!tag ",
    "%YAML 1.2\n",
    "---\n",
    "...\n",
    "|\n",
    ">-\n",
    "|+\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\"",
    "'",
    "#",
    "\\u0000",
    "\\",
    "\t",
    "\r\n",
    "\n  ",
    "\n    ",
    "\n      ",
    "~",
    "null",
    "true",
    "false",
    "yes",
    "0x1F",
    "0o17",
    ".nan",
    ".inf",
    "-.inf",
    "{{",
    "}}",
    "{{bindings.",
    ".summary}}",
    ".output}}",
    "{{objective.goal}}",
    "\u{feff}",
    "\u{202e}",
    "é",
    "😀",
    "\"seq\":",
    "\"v\":",
    "\"type\":",
    "\"event\":",
    "\"at\":",
    "\"id\":",
    "\"ids\":[",
    "\"level\":",
];

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "255",
    "256",
    "65536",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775809",
    "1e309",
    "-1e309",
    "1e-400",
    "0.5",
    "-0",
    "NaN",
    "1_000",
    "3600s",
    "1h",
    "999999999999d",
];

/// The tokens to insert: the fixed ones plus every key the seeds use.
pub fn dictionary(seeds: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut words: Vec<Vec<u8>> = TOKENS.iter().map(|t| t.as_bytes().to_vec()).collect();
    for seed in seeds {
        let text = String::from_utf8_lossy(seed);
        for line in text.lines() {
            let key = line.trim_start().trim_start_matches("- ").trim_start_matches('"');
            if let Some(end) = key.find([':', '"'])
                && end > 0
                && key[..end]
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                words.push(format!("{}: ", &key[..end]).into_bytes());
                words.push(format!("\"{}\":", &key[..end]).into_bytes());
            }
        }
    }
    words.sort();
    words.dedup();
    words
}

/// A mutation of `base`: one to eight stacked changes, `other` a donor of chunks.
pub fn mutate(rng: &mut StdRng, base: &[u8], other: &[u8], dictionary: &[Vec<u8>]) -> Vec<u8> {
    let mut data = base.to_vec();
    let changes = 1 + rng.random_range(0..8u32).min(rng.random_range(0..8u32));
    for _ in 0..changes {
        change(rng, &mut data, other, dictionary);
        if data.len() > MAX_LEN {
            data.truncate(MAX_LEN);
        }
    }
    data
}

fn change(rng: &mut StdRng, data: &mut Vec<u8>, other: &[u8], dictionary: &[Vec<u8>]) {
    let len = data.len();
    let at = |rng: &mut StdRng| rng.random_range(0..=len);
    match rng.random_range(0..13u32) {
        0 if len > 0 => {
            let i = rng.random_range(0..len);
            data[i] ^= 1 << rng.random_range(0..8);
        }
        1 if len > 0 => {
            const BYTES: &[u8] = b"\0\xff\n\r\t :-\"'{}[],&*!|>#%\\@`?~\xc3\x80";
            let i = rng.random_range(0..len);
            data[i] = BYTES[rng.random_range(0..BYTES.len())];
        }
        2 | 3 => {
            let token = &dictionary[rng.random_range(0..dictionary.len())];
            let i = at(rng);
            data.splice(i..i, token.iter().copied());
        }
        4 if len > 0 => {
            let i = rng.random_range(0..len);
            let n = rng.random_range(1..=64.min(len - i));
            data.drain(i..i + n);
        }
        5 if len > 0 => {
            let (i, n) = chunk(rng, len);
            let piece = data[i..i + n].to_vec();
            let j = at(rng);
            data.splice(j..j, piece);
        }
        6 if !other.is_empty() => {
            let (i, n) = chunk(rng, other.len());
            let j = at(rng);
            if rng.random_bool(0.5) {
                data.splice(j..j, other[i..i + n].iter().copied());
            } else {
                let end = (j + n).min(len);
                data.splice(j..end, other[i..i + n].iter().copied());
            }
        }
        7 | 8 => lines(rng, data),
        9 => number(rng, data),
        10 if len > 0 => data.truncate(rng.random_range(0..len)),
        11 if len > 0 => {
            let (i, n) = chunk(rng, len);
            let n = n.min(32);
            let times = rng.random_range(2..=1000);
            let piece: Vec<u8> = data[i..i + n].repeat(times);
            data.splice(i..i, piece);
        }
        12 if len > 0 => {
            // Replace a quoted or plain value with a dictionary token.
            let i = rng.random_range(0..len);
            let end = data[i..]
                .iter()
                .position(|&b| b == b'\n' || b == b',')
                .map_or(len, |p| i + p);
            let token = &dictionary[rng.random_range(0..dictionary.len())];
            data.splice(i..end, token.iter().copied());
        }
        _ => {
            let i = at(rng);
            data.insert(i, rng.random());
        }
    }
}

/// A random chunk of a buffer of `len` > 0 bytes: start and length.
fn chunk(rng: &mut StdRng, len: usize) -> (usize, usize) {
    let i = rng.random_range(0..len);
    let n = rng.random_range(1..=(len - i).min(256));
    (i, n)
}

/// Line-level changes: delete, duplicate, swap, re-indent.
fn lines(rng: &mut StdRng, data: &mut Vec<u8>) {
    let mut lines: Vec<Vec<u8>> = data.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    if lines.is_empty() {
        return;
    }
    let i = rng.random_range(0..lines.len());
    let j = rng.random_range(0..lines.len());
    match rng.random_range(0..5u32) {
        0 => {
            lines.remove(i);
        }
        1 => {
            let line = lines[i].clone();
            lines.insert(j, line);
        }
        2 => lines.swap(i, j),
        3 => {
            lines[i].splice(0..0, *b"  ");
        }
        _ => {
            let strip = lines[i].iter().take(2).take_while(|&&b| b == b' ').count();
            lines[i].drain(..strip);
        }
    }
    *data = lines.join(&b'\n');
}

/// Replaces a run of digits with an edge value.
fn number(rng: &mut StdRng, data: &mut Vec<u8>) {
    let digits: Vec<usize> = data
        .iter()
        .enumerate()
        .filter(|&(i, b)| b.is_ascii_digit() && (i == 0 || !data[i - 1].is_ascii_digit()))
        .map(|(i, _)| i)
        .collect();
    if digits.is_empty() {
        return;
    }
    let start = digits[rng.random_range(0..digits.len())];
    let end = data[start..]
        .iter()
        .position(|b| !b.is_ascii_digit() && *b != b'.')
        .map_or(data.len(), |p| start + p);
    let value = NUMBERS[rng.random_range(0..NUMBERS.len())];
    data.splice(start..end, value.bytes());
}
