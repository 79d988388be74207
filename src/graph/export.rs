//! `aot graph`: the work graph as Graphviz DOT or Mermaid, with each atom's
//! status as a colour and a label. Edges point from a dependency to the atom
//! that needs it (the order work flows); OR edges are dashed, the chosen one bold.

use std::fmt::Write as _;

use crate::state::{Atom, AtomStatus, StateFile};

fn colour(status: AtomStatus) -> &'static str {
    match status {
        AtomStatus::Pending => "#e0e0e0",
        AtomStatus::Running => "#90caf9",
        AtomStatus::Solved => "#a5d6a7",
        AtomStatus::Failed => "#ef9a9a",
        AtomStatus::Blocked => "#ffcc80",
        AtomStatus::Pruned => "#f5f5f5",
    }
}

fn kind(atom: &Atom) -> &'static str {
    if atom.or.is_some() {
        "or"
    } else if atom.agent.is_some() {
        "agent"
    } else {
        "run"
    }
}

/// A solved atom's binding summary, cut to 40 characters: what both
/// renderings show under the status.
fn summary(state: &StateFile, id: &str, atom: &Atom) -> Option<String> {
    let binding = state.bindings.get(id).filter(|_| atom.status == AtomStatus::Solved)?;
    let summary: String = binding.summary.trim().chars().take(40).collect();
    // An empty summary gets no arrow to nothing.
    (!summary.is_empty()).then_some(summary)
}

/// Mermaid label text: quotes and angle brackets as entity codes, so a
/// summary can neither end the label nor open an HTML tag.
fn mermaid_text(text: &str) -> String {
    text.replace('#', "#35;")
        .replace('"', "#quot;")
        .replace('<', "#lt;")
        .replace('>', "#gt;")
}

fn dot_string(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// Renders the graph as Graphviz DOT.
pub fn dot(state: &StateFile) -> String {
    let mut out = String::from(
        "digraph aot {\n  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n",
    );
    for (id, atom) in &state.graph.atoms {
        let shape = if atom.or.is_some() { ", shape=diamond" } else { "" };
        let mut label = format!("{id}\\n{} · {}", kind(atom), atom.status.as_str());
        if let Some(summary) = summary(state, id, atom) {
            label.push_str(&format!("\\n→ {}", summary.replace('\\', "\\\\").replace('"', "'")));
        }
        let _ = writeln!(
            out,
            "  {} [label=\"{label}\", fillcolor=\"{}\"{shape}];",
            dot_string(id),
            colour(atom.status)
        );
    }
    for (id, atom) in &state.graph.atoms {
        for dep in &atom.deps {
            let _ = writeln!(out, "  {} -> {};", dot_string(dep), dot_string(id));
        }
        for alt in atom.or.iter().flatten() {
            let style = if atom.chosen.as_deref() == Some(alt.as_str()) {
                "bold"
            } else {
                "dashed"
            };
            let _ = writeln!(
                out,
                "  {} -> {} [style={style}, arrowhead=odiamond];",
                dot_string(alt),
                dot_string(id)
            );
        }
    }
    out.push_str("}\n");
    out
}

/// Mermaid node ids must be simple; atom ids may hold `-` and `.`.
fn mermaid_id(index: usize) -> String {
    format!("n{index}")
}

/// Renders the graph as a Mermaid flowchart.
pub fn mermaid(state: &StateFile) -> String {
    let mut out = String::from("flowchart LR\n");
    let index = |id: &str| state.graph.atoms.get_index_of(id).map(mermaid_id).unwrap_or_default();
    for (i, (id, atom)) in state.graph.atoms.iter().enumerate() {
        let mut label = format!("{}<br/>{} · {}", mermaid_text(id), kind(atom), atom.status.as_str());
        if let Some(summary) = summary(state, id, atom) {
            label.push_str(&format!("<br/>→ {}", mermaid_text(&summary)));
        }
        let node = if atom.or.is_some() {
            format!("{{\"{label}\"}}")
        } else {
            format!("[\"{label}\"]")
        };
        let _ = writeln!(out, "  {}{node}:::{}", mermaid_id(i), atom.status.as_str());
    }
    for (id, atom) in &state.graph.atoms {
        for dep in &atom.deps {
            let _ = writeln!(out, "  {} --> {}", index(dep), index(id));
        }
        for alt in atom.or.iter().flatten() {
            let arrow = if atom.chosen.as_deref() == Some(alt.as_str()) {
                "==>"
            } else {
                "-.->"
            };
            let _ = writeln!(out, "  {} {arrow} {}", index(alt), index(id));
        }
    }
    for status in [
        AtomStatus::Pending,
        AtomStatus::Running,
        AtomStatus::Solved,
        AtomStatus::Failed,
        AtomStatus::Blocked,
        AtomStatus::Pruned,
    ] {
        let _ = writeln!(out, "  classDef {} fill:{}", status.as_str(), colour(status));
    }
    out
}

/// Renders the graph as an SVG picture, laid out in layers from left to
/// right by a pure-Rust layout (no Graphviz needed): a box per atom filled
/// with its status's colour, a diamond per OR atom, dependency edges solid,
/// OR alternatives dashed (the chosen one plain). `Err` when the layout
/// fails on the graph.
pub fn svg(state: &StateFile) -> Result<String, String> {
    use layout::backends::svg::SVGWriter;
    use layout::core::base::Orientation;
    use layout::core::color::Color;
    use layout::core::style::{LineStyleKind, StyleAttr};
    use layout::std_shapes::render::get_shape_size;
    use layout::std_shapes::shapes::{Arrow, Element, LineEndKind, ShapeKind};
    use layout::topo::layout::VisualGraph;

    if state.graph.atoms.is_empty() {
        return Ok("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"200\" height=\"40\"><text x=\"10\" y=\"25\">no atoms</text></svg>\n".into());
    }
    let dir = Orientation::LeftToRight;
    let build = || {
        let mut vg = VisualGraph::new(dir);
        let mut handles = Vec::with_capacity(state.graph.atoms.len());
        for (id, atom) in &state.graph.atoms {
            let mut label = format!("{id}\n{} · {}", kind(atom), atom.status.as_str());
            if let Some(summary) = summary(state, id, atom) {
                label.push_str(&format!("\n→ {summary}"));
            }
            let shape = ShapeKind::new_box(&label);
            let look = StyleAttr::new(
                Color::fast("#555555"),
                if atom.or.is_some() { 2 } else { 1 },
                Some(Color::fast(colour(atom.status))),
                if atom.or.is_some() { 0 } else { 8 },
                14,
            );
            let size = get_shape_size(dir, &shape, 14, false);
            handles.push(vg.add_node(Element::create(shape, look, dir, size)));
        }
        let arrow = |style: LineStyleKind| {
            Arrow::new(
                LineEndKind::None,
                LineEndKind::Arrow,
                style,
                "",
                &StyleAttr::simple(),
                &None,
                &None,
            )
        };
        for (i, atom) in state.graph.atoms.values().enumerate() {
            for dep in &atom.deps {
                if let Some(from) = state.graph.atoms.get_index_of(dep) {
                    vg.add_edge(arrow(LineStyleKind::Normal), handles[from], handles[i]);
                }
            }
            for alt in atom.or.iter().flatten() {
                if let Some(from) = state.graph.atoms.get_index_of(alt) {
                    let chosen = atom.chosen.as_deref() == Some(alt.as_str());
                    let style = if chosen {
                        LineStyleKind::Normal
                    } else {
                        LineStyleKind::Dashed
                    };
                    vg.add_edge(arrow(style), handles[from], handles[i]);
                }
            }
        }
        let mut svg = Extents::new(SVGWriter::new());
        vg.do_it(false, false, false, &mut svg);
        svg.finish()
    };
    // The layout is a library's: a panic in it is an error here, not a crash.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(build))
        .map_err(|_| "the graph layout failed on this graph".to_string())
}

/// The SVG backend, with the picture's real extent measured on the way: the
/// layout crate sizes its canvas from each label's length as if it were a
/// height, leaving most of a wide graph's picture empty below it.
struct Extents {
    inner: layout::backends::svg::SVGWriter,
    max: (f64, f64),
}

impl Extents {
    fn new(inner: layout::backends::svg::SVGWriter) -> Self {
        Self { inner, max: (0.0, 0.0) }
    }

    fn see(&mut self, x: f64, y: f64) {
        self.max = (self.max.0.max(x), self.max.1.max(y));
    }

    /// The document, its canvas cut to what is drawn (with a margin).
    fn finish(&self) -> String {
        let svg = self.inner.finalize();
        let (w, h) = (self.max.0.ceil() + 10.0, self.max.1.ceil() + 10.0);
        let Some(start) = svg.find("<svg ") else {
            return svg;
        };
        let Some(len) = svg[start..].find('>') else {
            return svg;
        };
        let rest = &svg[start + len..];
        format!(
            "{}<svg width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" xmlns=\"http://www.w3.org/2000/svg\"{rest}",
            &svg[..start]
        )
    }
}

impl layout::core::format::RenderBackend for Extents {
    fn draw_rect(
        &mut self,
        xy: layout::core::geometry::Point,
        size: layout::core::geometry::Point,
        look: &layout::core::style::StyleAttr,
        properties: Option<String>,
        clip: Option<layout::core::format::ClipHandle>,
    ) {
        self.see(xy.x + size.x, xy.y + size.y);
        self.inner.draw_rect(xy, size, look, properties, clip);
    }

    fn draw_line(
        &mut self,
        start: layout::core::geometry::Point,
        stop: layout::core::geometry::Point,
        look: &layout::core::style::StyleAttr,
        properties: Option<String>,
    ) {
        self.see(start.x.max(stop.x), start.y.max(stop.y));
        self.inner.draw_line(start, stop, look, properties);
    }

    fn draw_circle(
        &mut self,
        xy: layout::core::geometry::Point,
        size: layout::core::geometry::Point,
        look: &layout::core::style::StyleAttr,
        properties: Option<String>,
    ) {
        self.see(xy.x + size.x / 2.0, xy.y + size.y / 2.0);
        self.inner.draw_circle(xy, size, look, properties);
    }

    fn draw_text(&mut self, xy: layout::core::geometry::Point, text: &str, look: &layout::core::style::StyleAttr) {
        let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0) as f64;
        let font = look.font_size as f64;
        let lines = text.lines().count() as f64;
        self.see(xy.x + widest * font * 0.3, xy.y + lines * font / 2.0 + font);
        self.inner.draw_text(xy, text, look);
    }

    fn draw_arrow(
        &mut self,
        path: &[(layout::core::geometry::Point, layout::core::geometry::Point)],
        dashed: bool,
        head: (bool, bool),
        look: &layout::core::style::StyleAttr,
        properties: Option<String>,
        text: &str,
    ) {
        for (a, b) in path {
            self.see(a.x.max(b.x), a.y.max(b.y));
        }
        self.inner.draw_arrow(path, dashed, head, look, properties, text);
    }

    fn create_clip(
        &mut self,
        xy: layout::core::geometry::Point,
        size: layout::core::geometry::Point,
        rounded_px: usize,
    ) -> layout::core::format::ClipHandle {
        self.inner.create_clip(xy, size, rounded_px)
    }
}
