//! `{{ ... }}` templates in step settings.
//!
//! A template refers to a parameter (`{{ params.x }}`), a secret (`{{ secrets.x }}`), an output
//! of an earlier step (`{{ steps.build.outputs.url }}`) or the registered members of a service
//! (`{{ services.app.addresses }}`, `{{ services.app.count }}`, `{{ services.app.addresses[0] }}`). Parsing is separate from rendering so a
//! blueprint can be checked before anything runs, and so a step kind decides how each reference
//! reaches the step (a secret, for example, only ever as an environment variable).

use std::fmt;

/// One thing a template can refer to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reference {
    /// `{{ params.NAME }}`
    Param(String),
    /// `{{ secrets.NAME }}`
    Secret(String),
    /// `{{ steps.STEP.outputs.KEY }}`
    Output { step: String, key: String },
    /// `{{ services.NAME.addresses }}`, `.count` or `.addresses[i]`
    Service {
        service: String,
        field: ServiceField,
    },
}

/// What a template takes of a service's registered members.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServiceField {
    /// Every member's `ADDRESS:PORT`, sorted: a list.
    Addresses,
    /// How many members there are.
    Count,
    /// The member at this place in the sorted list.
    Address(usize),
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Param(name) => write!(f, "{{{{ params.{name} }}}}"),
            Reference::Secret(name) => write!(f, "{{{{ secrets.{name} }}}}"),
            Reference::Output { step, key } => write!(f, "{{{{ steps.{step}.outputs.{key} }}}}"),
            Reference::Service { service, field } => {
                let field = match field {
                    ServiceField::Addresses => "addresses".to_owned(),
                    ServiceField::Count => "count".to_owned(),
                    ServiceField::Address(at) => format!("addresses[{at}]"),
                };
                write!(f, "{{{{ services.{service}.{field} }}}}")
            }
        }
    }
}

/// A piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Text kept as written.
    Text(String),
    /// A reference to fill in.
    Reference(Reference),
}

/// A template that did not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// `{{` without a closing `}}`.
    #[error("`{{{{` at byte {0} has no closing `}}}}`")]
    Unclosed(usize),
    /// Something between the braces that is not a known reference.
    #[error("`{{{{ {0} }}}}` is not a reference: use params.NAME, secrets.NAME, steps.STEP.outputs.KEY, services.NAME.addresses, services.NAME.addresses[INDEX] or services.NAME.count")]
    Unknown(String),
}

/// A parsed template: text and references in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    segments: Vec<Segment>,
}

impl Template {
    /// Parses a text that may hold `{{ ... }}` references.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut segments = Vec::new();
        let mut rest = text;
        let mut offset = 0;
        while let Some(open) = rest.find("{{") {
            if open > 0 {
                segments.push(Segment::Text(rest[..open].to_owned()));
            }
            let after_open = &rest[open + 2..];
            let close = after_open
                .find("}}")
                .ok_or(TemplateError::Unclosed(offset + open))?;
            let inner = after_open[..close].trim();
            segments.push(Segment::Reference(parse_reference(inner)?));
            let consumed = open + 2 + close + 2;
            offset += consumed;
            rest = &rest[consumed..];
        }
        if !rest.is_empty() {
            segments.push(Segment::Text(rest.to_owned()));
        }
        Ok(Self { segments })
    }

    /// The text and the references, in order.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// The references, in the order they appear.
    pub fn references(&self) -> impl Iterator<Item = &Reference> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Reference(reference) => Some(reference),
            Segment::Text(_) => None,
        })
    }

    /// Fills in every reference with what `fill` gives for it.
    pub fn render<E>(
        &self,
        mut fill: impl FnMut(&Reference) -> Result<String, E>,
    ) -> Result<String, E> {
        let mut out = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => out.push_str(text),
                Segment::Reference(reference) => out.push_str(&fill(reference)?),
            }
        }
        Ok(out)
    }

    /// The template's only segment, when it is one reference and nothing else: a setting
    /// written as just `{{ services.app.addresses }}` takes the list itself.
    pub fn sole_reference(&self) -> Option<&Reference> {
        match self.segments.as_slice() {
            [Segment::Reference(reference)] => Some(reference),
            _ => None,
        }
    }
}

fn parse_reference(inner: &str) -> Result<Reference, TemplateError> {
    let unknown = || TemplateError::Unknown(inner.to_owned());
    if let Some(rest) = inner.strip_prefix("services.") {
        return parse_service(rest).ok_or_else(unknown);
    }
    let parts: Vec<&str> = inner.split('.').collect();
    let valid = |part: &&str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if !parts.iter().all(valid) {
        return Err(unknown());
    }
    match parts.as_slice() {
        ["params", name] => Ok(Reference::Param((*name).to_owned())),
        ["secrets", name] => Ok(Reference::Secret((*name).to_owned())),
        ["steps", step, "outputs", key] => Ok(Reference::Output {
            step: (*step).to_owned(),
            key: (*key).to_owned(),
        }),
        _ => Err(unknown()),
    }
}

/// `NAME.addresses`, `NAME.count` or `NAME.addresses[INDEX]`.
fn parse_service(text: &str) -> Option<Reference> {
    let (service, field) = text.split_once('.')?;
    let name_ok = !service.is_empty()
        && service
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !name_ok {
        return None;
    }
    let field = match field {
        "addresses" => ServiceField::Addresses,
        "count" => ServiceField::Count,
        _ => {
            let index = field.strip_prefix("addresses[")?.strip_suffix(']')?;
            if index.is_empty() || !index.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            ServiceField::Address(index.parse().ok()?)
        }
    };
    Some(Reference::Service {
        service: service.to_owned(),
        field,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_kind_of_reference() {
        let template = Template::parse(
            "echo {{ params.greeting }} {{secrets.key}} {{ steps.build.outputs.url }}!",
        )
        .expect("parses");
        let references: Vec<_> = template.references().cloned().collect();
        assert_eq!(
            references,
            vec![
                Reference::Param("greeting".into()),
                Reference::Secret("key".into()),
                Reference::Output {
                    step: "build".into(),
                    key: "url".into()
                },
            ]
        );
        let rendered: Result<String, ()> =
            template.render(|reference| Ok(format!("<{reference}>")));
        assert_eq!(
            rendered.expect("renders"),
            "echo <{{ params.greeting }}> <{{ secrets.key }}> <{{ steps.build.outputs.url }}>!"
        );
    }

    #[test]
    fn text_without_references_is_kept() {
        let template = Template::parse("plain text").expect("parses");
        assert_eq!(template.references().count(), 0);
        assert_eq!(
            template.render::<()>(|_| unreachable!()),
            Ok("plain text".to_owned())
        );
    }

    #[test]
    fn refuses_unclosed_and_unknown_references() {
        assert_eq!(
            Template::parse("a {{ params.x"),
            Err(TemplateError::Unclosed(2))
        );
        assert_eq!(
            Template::parse("{{ env.HOME }}"),
            Err(TemplateError::Unknown("env.HOME".into()))
        );
        assert!(Template::parse("{{ steps.build.url }}").is_err());
        assert!(Template::parse("{{ params. }}").is_err());
    }

    #[test]
    fn reads_every_field_of_a_service() {
        let template = Template::parse(
            "{{ services.app.addresses }} {{ services.app.count }} {{services.db.addresses[12]}}",
        )
        .expect("parses");
        let service = |name: &str, field| Reference::Service {
            service: name.into(),
            field,
        };
        assert_eq!(
            template.references().cloned().collect::<Vec<_>>(),
            vec![
                service("app", ServiceField::Addresses),
                service("app", ServiceField::Count),
                service("db", ServiceField::Address(12)),
            ]
        );
        let shown: Result<String, ()> = template.render(|reference| Ok(reference.to_string()));
        assert_eq!(
            shown.expect("renders"),
            "{{ services.app.addresses }} {{ services.app.count }} {{ services.db.addresses[12] }}"
        );
        for wrong in [
            "{{ services.app }}",
            "{{ services.app.members }}",
            "{{ services.app.addresses[] }}",
            "{{ services.app.addresses[-1] }}",
            "{{ services.app.addresses[0].x }}",
            "{{ services..count }}",
        ] {
            assert!(Template::parse(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn a_sole_reference_is_told_from_text_around_one() {
        let sole = Template::parse("{{ services.app.addresses }}").expect("parses");
        assert!(sole.sole_reference().is_some());
        let embedded = Template::parse("members: {{ services.app.addresses }}").expect("parses");
        assert!(embedded.sole_reference().is_none());
    }
}
