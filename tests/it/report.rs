//! `aot report` on a run with a backtrack, GGS decisions and parallel
//! atoms, opened in a real headless browser (Chromium): no console error,
//! the graph and the timeline there, a screenshot under `target/`, and no
//! external URL in the file. `aot graph --format svg` draws without Graphviz.

use crate::common::{TestEnv, root};

/// Chromium as Debian packages it (`.ci/run` installs it); `None` when it
/// is missing outside CI (the test says so), a failure in CI.
fn chromium() -> Option<std::path::PathBuf> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {name}")])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if let Some(path) = found.filter(|p| !p.is_empty()) {
            return Some(path.into());
        }
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "Chromium is needed for the report's browser test: `.ci/run` installs it (apt-get install chromium)"
    );
    eprintln!("skipped: no Chromium here (apt-get install chromium)");
    None
}

fn plan(env: &TestEnv) {
    env.write(
        "aot.yaml",
        "version: 2\nobjective:\n  goal: Build <both> halves & pick a source\n  background_intent: b\n  deliverables: d\n  definition_of_done: done\n  base_case: { command: 'test -e left && test -e right && test -e source' }\n  constraints: { max_retries: 0, max_parallel_agents: 2, isolation: none, verify: when_solved }\ngraph:\n  atoms:\n    left:\n      run: 'touch left; echo summary: left half'\n    right:\n      run: 'touch right; echo summary: right half'\n    source:\n      or: [remote, local]\n    remote:\n      run: 'echo \"error: unreachable\"; exit 1'\n      tool: curl\n      deps: [left, right]\n    local:\n      run: 'touch source; echo summary: local copy'\n      tool: cp\n      deps: [left, right]\n",
    );
}

#[test]
fn the_report_opens_in_a_browser_with_its_pictures_and_no_external_url() {
    let env = TestEnv::new();
    plan(&env);
    let run = env.aot(&["start"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let out = root().join("target").join("report-test");
    std::fs::create_dir_all(&out).unwrap();
    let page = out.join("report.html");
    let made = env.aot(&["report", "-o", page.to_str().unwrap()]);
    assert_eq!(made.code, 0, "{}", made.stderr);
    let html = std::fs::read_to_string(&page).unwrap();
    for url in ["http://", "https://", "src=\"//", "href=\"//", "<script src", "<link"] {
        assert!(!html.contains(url), "the page holds an external reference `{url}`");
    }
    // `url(...)` only for markers inside the page.
    assert!(html.match_indices("url(").all(|(i, _)| html[i..].starts_with("url(#")));
    // Escaped: the goal's `<both>` and `&` are text, not markup.
    assert!(html.contains("Build &lt;both&gt; halves &amp; pick a source"));
    for part in [
        "id=\"graph\"",
        "id=\"timeline\"",
        "id=\"loss\"",
        "class=\"bar solved\"",
        "class=\"bar failed\"",
    ] {
        assert!(html.contains(part), "{part}");
    }
    // Printed to stdout without -o: the same page.
    assert!(env.aot(&["report"]).stdout.starts_with("<!DOCTYPE html>"));

    let Some(browser) = chromium() else { return };
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
    ];
    let url = format!("file://{}", page.display());
    let dom = std::process::Command::new(&browser)
        .args(flags)
        .args(["--dump-dom", &url])
        .output()
        .expect("run chromium");
    let dom_text = String::from_utf8_lossy(&dom.stdout);
    let log = String::from_utf8_lossy(&dom.stderr);
    assert!(dom.status.success(), "{log}");
    let console: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(":CONSOLE(") || l.contains("Uncaught"))
        .collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    for part in [
        "<svg id=\"graph\"",
        "<svg id=\"timeline\"",
        "<svg id=\"loss\"",
        "auditor found nothing",
    ] {
        assert!(dom_text.contains(part), "the rendered page has {part}");
    }
    let shot = out.join("report.png");
    let _ = std::fs::remove_file(&shot);
    let screenshot = std::process::Command::new(&browser)
        .args(flags)
        .args([
            "--window-size=1200,2000",
            &format!("--screenshot={}", shot.display()),
            &url,
        ])
        .output()
        .expect("run chromium");
    assert!(
        screenshot.status.success(),
        "{}",
        String::from_utf8_lossy(&screenshot.stderr)
    );
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{} bytes", png.len());
}

#[test]
fn graph_svg_needs_no_graphviz_and_report_watch_rewrites_as_the_journal_grows() {
    let env = TestEnv::new();
    plan(&env);
    let svg = env.aot(&["graph", "--format", "svg"]);
    assert_eq!(svg.code, 0, "{}", svg.stderr);
    assert!(
        svg.stdout.contains("<svg") && svg.stdout.contains("remote"),
        "{}",
        svg.stdout
    );
    for id in ["left", "right", "source", "local"] {
        assert!(svg.stdout.contains(id), "{id}");
    }
    // --watch: the page is written, then again once a run journals more.
    let page = env.path("live.html");
    let mut watch = crate::common::aot_command(env.dir.path())
        .args(["report", "--watch", "-o", page.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::common::wait_until(env.dir.path(), "the first page", || page.exists());
    let first = std::fs::read_to_string(&page).unwrap();
    assert!(
        first.contains("http-equiv=\"refresh\""),
        "a watched page refreshes itself"
    );
    assert!(first.contains("No attempt has run yet"));
    assert_eq!(env.aot(&["start"]).code, 0);
    crate::common::wait_until(env.dir.path(), "the page after the run", || {
        std::fs::read_to_string(&page).is_ok_and(|p| p.contains("class=\"bar solved\"") && p.contains("completed"))
    });
    let _ = watch.kill();
    let _ = watch.wait();
}
