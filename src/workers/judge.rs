//! The LLM validators. An atom's plausible criteria (`criteria:`) are judged
//! by the validator (seed R4a, tool tier), one conversation per criterion,
//! with the reading tools only, answering
//! `{"verdict": "pass"|"fail", "evidence": "…", "failure_class": "logical"|"environmental"}`;
//! the objective's criteria by the meta-validator (R4b, brain tier,
//! conservative) once the base case holds. A verdict is read strictly: an
//! answer that does not say `pass` or `fail` is re-asked once, then the
//! criterion fails as environmental — an unread verdict never passes.
//! `check` commands and the base case are the [`CommandValidator`]'s.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::CommandValidator;
use super::llm::{Session, Talked};
use crate::engine::roles::{
    Assignment, BaseCaseRun, BoxFuture, Checked, Judgement, ObjectiveCheck, ObjectiveJudged, Validator, Work,
};
use crate::journal::event::Event;
use crate::llm::record::{Keeper, called};
use crate::llm::{Client, Message, Role, estimate_tokens};
use crate::model::Criterion;
use crate::model::text::{cut, first_line};
use crate::state::FailureClass;

/// The validator's prompt (`prompts/validator.md`).
pub const VALIDATOR_PROMPT: &str = include_str!("../../prompts/validator.md");

/// The meta-validator's prompt (`prompts/meta-validator.md`).
pub const META_VALIDATOR_PROMPT: &str = include_str!("../../prompts/meta-validator.md");

/// Model turns one criterion's judgement may take (reading files included).
pub const JUDGE_TURNS: u32 = 8;

/// The most tokens the meta-validator's answer may take.
const META_MAX_TOKENS: u32 = 2000;

/// Evidence kept from a verdict, in bytes.
const EVIDENCE_MAX: usize = 1000;

/// Judges `check` commands and the base case by running them, plausible
/// criteria with a model on the tool tier, the objective's criteria with one
/// on the brain tier.
pub struct LlmValidator {
    commands: CommandValidator,
    /// The tool tier's client, or why there is none.
    validator: Result<Client, String>,
    /// The brain tier's client, or why there is none.
    meta: Result<Client, String>,
    kept: Option<Keeper>,
}

/// A verdict as a validator answers it.
#[derive(Debug, Deserialize)]
struct Answer {
    verdict: String,
    #[serde(default)]
    evidence: String,
    #[serde(default)]
    failure_class: Option<String>,
}

/// One verdict of the meta-validator.
#[derive(Debug, Deserialize)]
struct MetaVerdict {
    criterion: usize,
    verdict: String,
    #[serde(default)]
    evidence: String,
}

#[derive(Debug, Deserialize)]
struct MetaAnswer {
    verdicts: Vec<MetaVerdict>,
}

/// A verdict read strictly: `pass`, or `fail` with its class.
fn read_verdict(answer: &Answer) -> Result<Option<FailureClass>, String> {
    let class = match answer.failure_class.as_deref().map(str::trim) {
        None | Some("") | Some("logical") => FailureClass::Logical,
        Some("environmental") => FailureClass::Environmental,
        Some(other) => return Err(format!("failure_class {other:?} is neither logical nor environmental")),
    };
    match answer.verdict.trim().to_ascii_lowercase().as_str() {
        "pass" => Ok(None),
        "fail" => Ok(Some(class)),
        other => Err(format!("verdict {other:?} is neither pass nor fail")),
    }
}

impl LlmValidator {
    /// Plausible criteria judged by `validator` (tool tier), the objective's
    /// by `meta` (brain tier); either may be missing, with why.
    pub fn new(validator: Result<Client, String>, meta: Result<Client, String>) -> Self {
        Self {
            commands: CommandValidator,
            validator,
            meta,
            kept: None,
        }
    }

    /// Keeps each conversation in `folder` (`.aot/llm/`), named relative to `base`.
    pub fn keeping(mut self, folder: PathBuf, base: &Path) -> Self {
        self.kept = Some(Keeper::new(folder, base));
        self
    }

    async fn plausible(
        &self,
        client: &Client,
        index: usize,
        text: &str,
        assignment: &Assignment,
        work: &Work,
        cancel: &CancellationToken,
    ) -> Judgement {
        let criterion = Criterion::Plausible {
            index,
            text: text.to_string(),
        };
        let spec = &assignment.spec;
        let task = spec.agent.as_deref().or(spec.run.as_deref()).unwrap_or("(no action)");
        let prompt = VALIDATOR_PROMPT
            .replace("{{goal}}", &assignment.brief.goal)
            .replace("{{atom}}", &assignment.atom)
            .replace("{{summary}}", or_none(&assignment.report.redact(&work.summary)))
            .replace("{{output}}", or_none(&assignment.report.redact(&work.output)))
            .replace("{{criterion}}", text)
            .replace("{{task}}", task);
        let mut messages = vec![Message::user(prompt)];
        let mut session = Session::new(client, Role::Validator, assignment, true, self.kept.as_ref());
        let mut repaired = false;
        let verdict = loop {
            let turns = if repaired { 1 } else { JUDGE_TURNS };
            let reply = match session.talk(&mut messages, turns, cancel).await {
                Talked::Answered(reply) => reply,
                Talked::Cancelled => return Judgement::Cancelled,
                Talked::OverBudget(message) => return Judgement::OverBudget(message),
                Talked::Failed(message, _) => break Err((FailureClass::Environmental, message)),
                Talked::TimedOut(_) => break Err((FailureClass::Environmental, "the validator timed out".into())),
                Talked::OutOfTurns(_) => {
                    break Err((
                        FailureClass::Environmental,
                        format!("the validator gave no verdict within {JUDGE_TURNS} turns"),
                    ));
                }
            };
            let read = crate::llm::parse_json::<Answer>(&reply.content)
                .and_then(|answer| read_verdict(&answer).map(|class| (class, answer.evidence)));
            match read {
                Ok(verdict) => break Ok(verdict),
                Err(problem) if !repaired => {
                    repaired = true;
                    messages.push(Message::assistant(reply.content));
                    messages.push(Message::user(format!(
                        "Your verdict could not be read: {problem}. Answer again with only the JSON object {{\"verdict\": \"pass\" or \"fail\", \"evidence\": \"…\", \"failure_class\": \"logical\" or \"environmental\"}}."
                    )));
                }
                Err(problem) => {
                    break Err((
                        FailureClass::Environmental,
                        format!("the validator's verdict could not be read, also after a repair re-ask: {problem}"),
                    ));
                }
            }
        };
        let (passed, class, evidence) = match verdict {
            Ok((None, evidence)) => (true, None, evidence),
            Ok((Some(class), evidence)) => (false, Some(class), evidence),
            Err((class, why)) => (false, Some(class), why),
        };
        let evidence = cut(evidence.trim(), EVIDENCE_MAX);
        assignment.report.send(
            Event::CriterionJudged {
                atom: Some(assignment.atom.clone()),
                attempt: Some(assignment.attempt),
                criterion,
                passed,
                evidence: evidence.clone(),
                class,
            },
            None,
        );
        match class {
            None => Judgement::Passed,
            Some(class) => Judgement::Failed {
                class,
                message: format!("the validator finds `{}` unmet: {evidence}", first_line(text)),
                ended: Default::default(),
            },
        }
    }

    async fn judge_objective(
        &self,
        client: &Client,
        check: &ObjectiveCheck,
        cancel: &CancellationToken,
    ) -> ObjectiveJudged {
        let o = &check.objective;
        let list = |items: Vec<String>| {
            if items.is_empty() {
                "(none)".to_string()
            } else {
                items.join("\n")
            }
        };
        let prompt = META_VALIDATOR_PROMPT
            .replace("{{goal}}", o.goal.as_deref().unwrap_or("(none)"))
            .replace("{{deliverables}}", o.deliverables.as_deref().unwrap_or("(none)"))
            .replace(
                "{{definition_of_done}}",
                o.definition_of_done.as_deref().unwrap_or("(none)"),
            )
            .replace("{{base_case}}", &check.evidence.command)
            .replace(
                "{{evidence}}",
                or_none(&check.report.redact(&check.evidence.output_tail)),
            )
            .replace(
                "{{work}}",
                &list(check.work.iter().map(|(a, s)| format!("- {a}: {s}")).collect()),
            )
            .replace(
                "{{criteria}}",
                &list(
                    o.criteria
                        .iter()
                        .enumerate()
                        .map(|(i, c)| format!("{i}. {c}"))
                        .collect(),
                ),
            );
        let messages = vec![Message::user(prompt)];
        // The worst case: the call and a repair re-ask holding the first answer.
        let prompt_tokens: u64 = messages.iter().map(|m| estimate_tokens(&m.content) + 4).sum();
        let reply = u64::from(META_MAX_TOKENS);
        let (worst_prompt, worst_reply) = ((2 * prompt_tokens + reply) * 11 / 10, 2 * reply * 11 / 10);
        let model = &client.endpoint().model;
        let cost = check
            .llm
            .as_ref()
            .and_then(|l| l.prices.get(model))
            .map(|p| p.cost(worst_prompt, worst_reply));
        let hold = match check
            .report
            .hold(Role::MetaValidator.name(), worst_prompt + worst_reply, cost, cancel)
            .await
        {
            Ok(Some(hold)) => hold,
            Ok(None) => return ObjectiveJudged::Cancelled,
            Err(message) => return ObjectiveJudged::OverBudget(message),
        };
        let asked = tokio::select! {
            asked = client.json::<MetaAnswer>(Role::MetaValidator, &messages, META_MAX_TOKENS) => Some(asked),
            () = cancel.cancelled() => None,
        };
        let Some((answer, calls)) = asked else {
            return ObjectiveJudged::Cancelled;
        };
        let mut hold = Some(hold);
        for call in &calls {
            check.report.send(
                called(Role::MetaValidator, call, model, None, check.llm.as_ref(), None),
                hold.take(),
            );
        }
        let verdicts = match answer {
            Ok(answer) => answer.verdicts,
            Err(e) => return ObjectiveJudged::Failed(e.message),
        };
        // Conservative: a criterion without a readable pass fails.
        let mut unmet = Vec::new();
        let mut first = None;
        for (index, text) in o.criteria.iter().enumerate() {
            let verdict = verdicts.iter().find(|v| v.criterion == index);
            let (passed, evidence) = match verdict {
                Some(v) if v.verdict.trim().eq_ignore_ascii_case("pass") => (true, v.evidence.clone()),
                Some(v) if v.verdict.trim().eq_ignore_ascii_case("fail") => (false, v.evidence.clone()),
                Some(v) => (false, format!("the verdict {:?} is neither pass nor fail", v.verdict)),
                None => (false, "the meta-validator gave no verdict for it".to_string()),
            };
            let evidence = cut(evidence.trim(), EVIDENCE_MAX);
            check.report.send(
                Event::CriterionJudged {
                    atom: None,
                    attempt: None,
                    criterion: Criterion::Plausible {
                        index,
                        text: text.clone(),
                    },
                    passed,
                    evidence: evidence.clone(),
                    class: (!passed).then_some(FailureClass::Logical),
                },
                None,
            );
            if !passed {
                first.get_or_insert((index, text.clone()));
                unmet.push(format!("criteria[{index}] `{}`: {evidence}", first_line(text)));
            }
        }
        match first {
            None => ObjectiveJudged::Holds,
            Some(first) => ObjectiveJudged::Unmet { first, lines: unmet },
        }
    }
}

fn or_none(text: &str) -> &str {
    if text.trim().is_empty() { "(none)" } else { text }
}

impl Validator for LlmValidator {
    fn judge<'a>(
        &'a self,
        criterion: &'a Criterion,
        assignment: &'a Assignment,
        work: &'a Work,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Judgement> {
        match (criterion, &self.validator) {
            (Criterion::Plausible { index, text }, Ok(client)) => {
                // The text as written: the criterion names it by index.
                let text = assignment.spec.criteria.get(*index).unwrap_or(text);
                Box::pin(self.plausible(client, *index, text, assignment, work, cancel))
            }
            _ => self.commands.judge(criterion, assignment, work, cancel),
        }
    }

    fn base_case<'a>(&'a self, run: &'a BaseCaseRun, cancel: &'a CancellationToken) -> BoxFuture<'a, Option<Checked>> {
        self.commands.base_case(run, cancel)
    }

    fn plausible_judge(&self) -> Result<(), String> {
        match &self.validator {
            Ok(_) => Ok(()),
            Err(why) => Err(why.clone()),
        }
    }

    fn objective<'a>(
        &'a self,
        check: &'a ObjectiveCheck,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ObjectiveJudged> {
        match &self.meta {
            _ if check.objective.criteria.is_empty() => Box::pin(std::future::ready(ObjectiveJudged::Holds)),
            Ok(client) => Box::pin(self.judge_objective(client, check, cancel)),
            Err(why) => Box::pin(std::future::ready(ObjectiveJudged::NotJudged(why.clone()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(verdict: &str, class: Option<&str>) -> Answer {
        Answer {
            verdict: verdict.into(),
            evidence: String::new(),
            failure_class: class.map(str::to_string),
        }
    }

    #[test]
    fn verdicts_are_read_strictly() {
        assert_eq!(read_verdict(&answer("pass", None)), Ok(None));
        assert_eq!(read_verdict(&answer(" PASS ", Some("logical"))), Ok(None));
        assert_eq!(read_verdict(&answer("fail", None)), Ok(Some(FailureClass::Logical)));
        assert_eq!(
            read_verdict(&answer("fail", Some("environmental"))),
            Ok(Some(FailureClass::Environmental))
        );
        assert!(read_verdict(&answer("probably", None)).is_err());
        assert!(read_verdict(&answer("yes", None)).is_err());
        assert!(read_verdict(&answer("fail", Some("cosmic"))).is_err());
    }
}
