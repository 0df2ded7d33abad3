//! A `script` command's `{{ ... }}` references, placed according to the shell quoting around
//! each.
//!
//! A value never enters the command text: each reference becomes a shell variable whose value
//! travels in the environment, and the shell never runs or re-reads what a variable expands to.
//! What this module decides is the text that names the variable, so the step sees exactly the
//! value whatever the user's quoting around the reference:
//!
//! | where the reference is                      | what it becomes                  |
//! |---------------------------------------------|----------------------------------|
//! | unquoted, in a command, `$( )` or backticks | `"${V}"`: one word, no globbing  |
//! | inside `"..."` or a here-document           | `${V}`                           |
//! | inside `'...'`                              | `'"${V}"'`: close, value, reopen |
//! | in a here-document with a quoted delimiter  | `${V}`, the here-document made unquoted with its `\`, `$` and `` ` `` escaped |
//! | in a `#` comment                            | `${V}`, which the shell ignores  |
//! | inside `$(( ))`                             | `${V}`, whose value the caller must check is a whole number |
//!
//! The contexts are found by a small lexer of POSIX `sh` over the template's text (quotes,
//! backslashes, `$( )`, backticks with their own backslash rules, `${ }`, `$(( ))`, here-documents,
//! comments, `case` patterns). Where a value cannot be given exactly or safely (inside `${ }` or
//! `$'...'`, after a `\` or a bare `$`, in a here-document's delimiter, or in a command whose
//! quoting does not close) the reference is refused with a [`QuotingError`] that says what to
//! write instead, so a blueprint is refused before anything runs.
//!
//! Inside `$(( ))` the shell evaluates what a variable holds as arithmetic, and bash runs the
//! commands of an array index in it (`a[$(...)]`). Values are only known when the step runs, so
//! [`ShellCommand::numbers`] names the references there, and the runner refuses to run the step
//! unless each of their values is a whole number.

use std::ops::Range;

use crate::template::{Reference, Segment, Template};

/// Why a reference cannot be placed where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unsafe {
    /// Inside `${ ... }`.
    #[error("is inside a `${{...}}` expansion, whose quoting sh and bash read differently; assign it to a variable first (`v={{{{ ... }}}}`) and use `$v` there")]
    ParameterExpansion,
    /// Inside `$'...'`.
    #[error("is inside `$'...'` quotes, which sh (dash) does not have; write '...' or \"...\" around it instead")]
    AnsiC,
    /// Right after a `\` that escapes it.
    #[error("follows a `\\`, which would escape the quoting that keeps the value whole; remove the backslash")]
    Backslash,
    /// Right after a bare `$`.
    #[error("follows a bare `$`, which the shell would read as the start of a variable; write `\\$` or '$' for a literal dollar")]
    Dollar,
    /// In a here-document's delimiter word.
    #[error(
        "is in a here-document's delimiter, which must be fixed text; write the delimiter out"
    )]
    Delimiter,
    /// In a quoted here-document inside backticks.
    #[error("is in a here-document with a quoted delimiter inside backticks; write `$( )` instead of the backticks")]
    HereDocInBackticks,
    /// In a quoted here-document whose delimiter cannot be written unquoted.
    #[error("is in a here-document whose quoted delimiter is not plain letters, digits and '_'; use a delimiter like 'EOF'")]
    OddDelimiter,
    /// The command's quoting could not be followed.
    #[error("cannot be placed: the command's quoting could not be followed ({0}); fix the command so it is valid sh")]
    Unfollowable(Unfollowable),
}

/// What made a command's quoting impossible to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unfollowable {
    /// A quote or a substitution that does not close.
    #[error("a `{0}` is never closed")]
    Unclosed(&'static str),
    /// A `)` that closes nothing.
    #[error("a `)` closes nothing")]
    UnmatchedParen,
    /// A place the lexer did not reach (a bug of this module, refused to be safe).
    #[error("the quoting at this place was not followed")]
    Lost,
    /// A `$'...'` holding `\'`: sh and bash end it in different places.
    #[error("a `$'...'` holds `\\'`, and sh and bash end it in different places")]
    AnsiCQuote,
}

/// A reference of a `script` command that cannot be given to the step safely.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{reference}` {why}")]
pub struct QuotingError {
    /// The reference.
    pub reference: Reference,
    /// Why, and what to write instead.
    pub why: Unsafe,
}

/// A `script` command ready for `/bin/sh -c`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShellCommand {
    /// The command text, naming the variables instead of holding the values.
    pub text: String,
    /// The references (1-based, in order of appearance) inside `$(( ))`, whose values must be
    /// whole numbers.
    pub numbers: Vec<usize>,
}

/// The command of `template` for `/bin/sh -c`, with the `n`th reference (1-based, in order of
/// appearance) replaced by an expansion of the variable `variable(n)` quoted for where it
/// stands; the caller puts each value in that variable. Every reference that cannot be placed
/// safely is an error.
pub fn script_command(
    template: &Template,
    variable: impl Fn(usize) -> String,
) -> Result<ShellCommand, Vec<QuotingError>> {
    let mut references = Vec::new();
    let mut items = Vec::new();
    for segment in template.segments() {
        match segment {
            Segment::Text(text) => items.extend(text.chars().map(Item::Char)),
            Segment::Reference(reference) => {
                items.push(Item::Ref(references.len()));
                references.push(reference.clone());
            }
        }
    }
    let mut found = Findings {
        places: vec![None; references.len()],
        numbers: Vec::new(),
        heredocs: Vec::new(),
        unfollowable: None,
    };
    Lexer::new(
        items.iter().copied().enumerate().collect(),
        &mut found,
        false,
    )
    .code(Frame::Top);

    let mut errors = Vec::new();
    let refuse = |index: usize, why: Unsafe, errors: &mut Vec<QuotingError>| {
        errors.push(QuotingError {
            reference: references[index].clone(),
            why,
        })
    };
    if let Some(why) = found.unfollowable {
        if !references.is_empty() {
            refuse(0, Unsafe::Unfollowable(why), &mut errors);
            return Err(errors);
        }
    }
    // Quoted here-documents that hold references are made unquoted, their text escaped (below).
    let mut converted = Vec::new();
    for heredoc in &found.heredocs {
        if !heredoc.quoted || heredoc.references.is_empty() {
            continue;
        }
        let why = if heredoc.in_backticks {
            Some(Unsafe::HereDocInBackticks)
        } else if !heredoc
            .delimiter
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            Some(Unsafe::OddDelimiter)
        } else {
            None
        };
        match why {
            Some(why) => {
                for &index in &heredoc.references {
                    found.places[index] = Some(Place::Refused(why));
                }
            }
            None => converted.push(heredoc),
        }
    }

    let mut out = String::new();
    let mut at = 0;
    while at < items.len() {
        if let Some(heredoc) = converted.iter().find(|h| h.word.start == at) {
            out.push_str(&heredoc.delimiter);
            at = heredoc.word.end.max(at + 1);
            continue;
        }
        match items[at] {
            Item::Char(c) => {
                let escaped =
                    matches!(c, '\\' | '$' | '`') && converted.iter().any(|h| h.body.contains(&at));
                if escaped {
                    out.push('\\');
                }
                out.push(c);
            }
            Item::Ref(index) => {
                let name = variable(index + 1);
                match found.places[index] {
                    Some(Place::Word) => out.push_str(&format!("\"${{{name}}}\"")),
                    Some(Place::SingleQuoted) => out.push_str(&format!("'\"${{{name}}}\"'")),
                    Some(
                        Place::DoubleQuoted | Place::HereDoc | Place::Comment | Place::Arithmetic,
                    ) => out.push_str(&format!("${{{name}}}")),
                    Some(Place::Refused(why)) => refuse(index, why, &mut errors),
                    // The lexer visits every item; an unvisited one is a bug, refused to be safe.
                    None => refuse(index, Unsafe::Unfollowable(Unfollowable::Lost), &mut errors),
                }
            }
        }
        at += 1;
    }
    if errors.is_empty() {
        let mut numbers: Vec<usize> = found.numbers.iter().map(|index| index + 1).collect();
        numbers.sort_unstable();
        numbers.dedup();
        Ok(ShellCommand { text: out, numbers })
    } else {
        Err(errors)
    }
}

/// A character of the template's text, or its `n`th reference (0-based).
#[derive(Clone, Copy, Debug)]
enum Item {
    Char(char),
    Ref(usize),
}

/// Where a reference stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Word,
    DoubleQuoted,
    SingleQuoted,
    HereDoc,
    Comment,
    /// Directly inside `$(( ))`, where double quotes are not arithmetic.
    Arithmetic,
    Refused(Unsafe),
}

/// A here-document, by the positions of its items in the template.
#[derive(Debug)]
struct HereDoc {
    /// The delimiter with its quotes removed.
    delimiter: String,
    /// Whether any part of the delimiter was quoted, so nothing in the body expands.
    quoted: bool,
    /// `<<-`: leading tabs are stripped from the body's lines and the delimiter line.
    strip_tabs: bool,
    /// Whether it is inside backticks, whose own backslash rules forbid rewriting it.
    in_backticks: bool,
    /// The delimiter word as written after `<<`.
    word: Range<usize>,
    /// The body, without the closing delimiter line.
    body: Range<usize>,
    /// The references in the body.
    references: Vec<usize>,
}

/// What the lexer found.
struct Findings {
    places: Vec<Option<Place>>,
    /// References inside `$(( ))`, at any depth: what they expand to is evaluated as arithmetic.
    numbers: Vec<usize>,
    heredocs: Vec<HereDoc>,
    unfollowable: Option<Unfollowable>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    /// The whole command, or the inside of backticks: ends with the text.
    Top,
    /// The inside of `$( )`: ends at its `)`.
    Paren,
}

/// Reserved words after which a new command starts (for spotting `case`).
const OPENERS: [&str; 10] = [
    "then", "do", "else", "elif", "if", "while", "until", "!", "{", "}",
];

/// At the end of an unquoted word: counts `case` (as a command) and `esac`, whose patterns' `)`
/// close nothing, and notes whether the next word starts a command.
fn end_word(word: &mut Option<String>, command_start: &mut bool, cases: &mut usize) {
    match word.as_deref() {
        Some("") => {}
        Some(text) => {
            if *command_start && text == "case" {
                *cases += 1;
            } else if *command_start && text == "esac" {
                *cases = cases.saturating_sub(1);
            }
            *command_start = OPENERS.contains(&text);
        }
        None => *command_start = false,
    }
    *word = Some(String::new());
}

/// A lexer over items, each with its position in the template (the inside of backticks is
/// lexed by a lexer of its own, over the items the backticks' backslash rules leave).
struct Lexer<'f> {
    items: Vec<(usize, Item)>,
    pos: usize,
    found: &'f mut Findings,
    in_backticks: bool,
    /// Set inside `${ }`: every reference there is refused.
    refusing: Option<Unsafe>,
    /// Set inside `$(( ))`.
    arithmetic: bool,
    /// Here-documents whose bodies start at the next newline.
    pending: Vec<usize>,
}

impl<'f> Lexer<'f> {
    fn new(items: Vec<(usize, Item)>, found: &'f mut Findings, in_backticks: bool) -> Self {
        Self {
            items,
            pos: 0,
            found,
            in_backticks,
            refusing: None,
            arithmetic: false,
            pending: Vec::new(),
        }
    }

    fn peek(&self, ahead: usize) -> Option<Item> {
        self.items.get(self.pos + ahead).map(|(_, item)| *item)
    }

    fn peek_is(&self, ahead: usize, c: char) -> bool {
        matches!(self.peek(ahead), Some(Item::Char(x)) if x == c)
    }

    fn next(&mut self) -> Option<Item> {
        let item = self.peek(0)?;
        self.pos += 1;
        Some(item)
    }

    fn place(&mut self, index: usize, place: Place) {
        if self.arithmetic {
            self.found.numbers.push(index);
        }
        let place = match self.refusing {
            Some(why) => Place::Refused(why),
            None => place,
        };
        self.found.places[index] = Some(place);
    }

    fn unfollowable(&mut self, why: Unfollowable) {
        self.found.unfollowable.get_or_insert(why);
    }

    /// After a `\`: the escaped item, a reference there being refused.
    fn escaped(&mut self) {
        if let Some(Item::Ref(index)) = self.next() {
            self.place(index, Place::Refused(Unsafe::Backslash));
        }
    }

    /// Commands: the whole text, or the inside of `$( )` up to its `)`.
    fn code(&mut self, frame: Frame) {
        let mut depth = 0usize;
        let mut cases = 0usize;
        // The current word's plain characters, to spot `case` and `esac`; None once it holds
        // anything quoted or expanded.
        let mut word: Option<String> = Some(String::new());
        let mut word_start = true;
        let mut command_start = true;
        while let Some(item) = self.next() {
            let c = match item {
                Item::Ref(index) => {
                    self.place(index, Place::Word);
                    word = None;
                    word_start = false;
                    continue;
                }
                Item::Char(c) => c,
            };
            match c {
                '\\' => {
                    if self.peek_is(0, '\n') {
                        self.pos += 1;
                        continue;
                    }
                    self.escaped();
                    word = None;
                    word_start = false;
                }
                '\'' => {
                    self.single_quoted();
                    word = None;
                    word_start = false;
                }
                '"' => {
                    self.double_quoted();
                    word = None;
                    word_start = false;
                }
                '`' => {
                    self.backticks(false);
                    word = None;
                    word_start = false;
                }
                '$' => {
                    self.dollar(false);
                    word = None;
                    word_start = false;
                }
                '#' if word_start => self.comment(),
                '\n' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    self.heredoc_bodies();
                    word_start = true;
                    command_start = true;
                }
                ' ' | '\t' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    word_start = true;
                }
                ';' | '&' | '|' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    word_start = true;
                    command_start = true;
                }
                '(' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    depth += 1;
                    word_start = true;
                    command_start = true;
                }
                ')' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    if depth > 0 {
                        depth -= 1;
                    } else if cases > 0 {
                        // The end of a `case` pattern.
                    } else if frame == Frame::Paren {
                        return;
                    } else {
                        self.unfollowable(Unfollowable::UnmatchedParen);
                    }
                    word_start = true;
                    command_start = true;
                }
                '<' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    if self.peek_is(0, '<') && !self.peek_is(1, '<') {
                        self.pos += 1;
                        let strip_tabs = self.peek_is(0, '-');
                        if strip_tabs {
                            self.pos += 1;
                        }
                        self.heredoc_word(strip_tabs);
                    } else {
                        // `<<<`, bash's here-string, or `<`: the word after is an ordinary word.
                        while self.peek_is(0, '<') {
                            self.pos += 1;
                        }
                    }
                    word_start = true;
                }
                '>' => {
                    end_word(&mut word, &mut command_start, &mut cases);
                    word_start = true;
                }
                other => {
                    if let Some(text) = word.as_mut() {
                        text.push(other);
                    }
                    word_start = false;
                }
            }
        }
        if frame == Frame::Paren {
            self.unfollowable(Unfollowable::Unclosed("$("));
        }
    }

    /// A comment, up to (not including) its newline: nothing in it expands.
    fn comment(&mut self) {
        while let Some(item) = self.peek(0) {
            match item {
                Item::Char('\n') => return,
                Item::Ref(index) => self.place(index, Place::Comment),
                Item::Char(_) => {}
            }
            self.pos += 1;
        }
    }

    /// After an opening `'`.
    fn single_quoted(&mut self) {
        while let Some(item) = self.next() {
            match item {
                Item::Char('\'') => return,
                Item::Ref(index) => self.place(index, Place::SingleQuoted),
                Item::Char(_) => {}
            }
        }
        self.unfollowable(Unfollowable::Unclosed("'"));
    }

    /// After an opening `"`.
    fn double_quoted(&mut self) {
        while let Some(item) = self.next() {
            match item {
                Item::Char('"') => return,
                Item::Char('\\') => self.escaped(),
                Item::Char('$') => self.dollar(true),
                Item::Char('`') => self.backticks(true),
                Item::Ref(index) => self.place(index, Place::DoubleQuoted),
                Item::Char(_) => {}
            }
        }
        self.unfollowable(Unfollowable::Unclosed("\""));
    }

    /// After a `$`.
    fn dollar(&mut self, in_double_quotes: bool) {
        match self.peek(0) {
            Some(Item::Ref(index)) => {
                self.pos += 1;
                self.place(index, Place::Refused(Unsafe::Dollar));
            }
            Some(Item::Char('{')) => {
                self.pos += 1;
                self.refusing_in(Unsafe::ParameterExpansion, |lexer| {
                    lexer.braces(in_double_quotes)
                });
            }
            Some(Item::Char('(')) if self.peek_is(1, '(') => {
                self.pos += 2;
                let outer = self.arithmetic;
                self.arithmetic = true;
                self.arithmetic_expression();
                self.arithmetic = outer;
            }
            Some(Item::Char('(')) => {
                self.pos += 1;
                // A fresh context: quotes inside `$( )` are its own, even within "...".
                self.code(Frame::Paren);
            }
            Some(Item::Char('\'')) if !in_double_quotes => {
                self.pos += 1;
                self.ansi_c();
            }
            _ => {}
        }
    }

    fn refusing_in(&mut self, why: Unsafe, lex: impl FnOnce(&mut Self)) {
        let outer = self.refusing;
        self.refusing = outer.or(Some(why));
        lex(self);
        self.refusing = outer;
    }

    /// After `${`, up to its `}`.
    fn braces(&mut self, in_double_quotes: bool) {
        while let Some(item) = self.next() {
            match item {
                Item::Char('}') => return,
                Item::Char('\\') => self.escaped(),
                Item::Char('\'') if !in_double_quotes => self.single_quoted(),
                Item::Char('"') => self.double_quoted(),
                Item::Char('$') => self.dollar(in_double_quotes),
                Item::Char('`') => self.backticks(in_double_quotes),
                Item::Ref(index) => self.place(index, Place::Word),
                Item::Char(_) => {}
            }
        }
        self.unfollowable(Unfollowable::Unclosed("${"));
    }

    /// After `$((`, up to its `))`.
    fn arithmetic_expression(&mut self) {
        let mut depth = 0usize;
        while let Some(item) = self.next() {
            match item {
                Item::Char('(') => depth += 1,
                Item::Char(')') if depth > 0 => depth -= 1,
                Item::Char(')') if self.peek_is(0, ')') => {
                    self.pos += 1;
                    return;
                }
                Item::Char('\\') => self.escaped(),
                Item::Char('\'') => self.single_quoted(),
                Item::Char('"') => self.double_quoted(),
                Item::Char('$') => self.dollar(false),
                Item::Char('`') => self.backticks(false),
                Item::Ref(index) => self.place(index, Place::Arithmetic),
                Item::Char(_) => {}
            }
        }
        self.unfollowable(Unfollowable::Unclosed("$(("));
    }

    /// After `$'` (bash's ANSI-C quotes; dash 0.5.12 reads `$` and then '...').
    fn ansi_c(&mut self) {
        while let Some(item) = self.next() {
            match item {
                Item::Char('\'') => return,
                Item::Char('\\') => {
                    if self.peek_is(0, '\'') {
                        self.unfollowable(Unfollowable::AnsiCQuote);
                    }
                    self.escaped();
                }
                Item::Ref(index) => self.place(index, Place::Refused(Unsafe::AnsiC)),
                Item::Char(_) => {}
            }
        }
        self.unfollowable(Unfollowable::Unclosed("$'"));
    }

    /// After an opening backtick: the inside, as the shell reads it once the backticks'
    /// backslashes are undone (`\$`, `` \` ``, `\\`, and `\"` within double quotes), lexed as
    /// commands of their own.
    fn backticks(&mut self, in_double_quotes: bool) {
        let mut inside = Vec::new();
        loop {
            let Some((at, item)) = self.items.get(self.pos).copied() else {
                self.unfollowable(Unfollowable::Unclosed("`"));
                break;
            };
            self.pos += 1;
            match item {
                Item::Char('`') => break,
                Item::Char('\\') => match self.items.get(self.pos).copied() {
                    Some((next_at, Item::Char(c)))
                        if matches!(c, '$' | '`' | '\\') || (in_double_quotes && c == '"') =>
                    {
                        self.pos += 1;
                        inside.push((next_at, Item::Char(c)));
                    }
                    // A backslash before anything else stays for the inner command to read.
                    _ => inside.push((at, item)),
                },
                _ => inside.push((at, item)),
            }
        }
        let (refusing, arithmetic) = (self.refusing, self.arithmetic);
        let mut inner = Lexer::new(inside, self.found, true);
        inner.refusing = refusing;
        inner.arithmetic = arithmetic;
        inner.code(Frame::Top);
    }

    /// After `<<` or `<<-`: the delimiter word; the body is read at the next newline.
    fn heredoc_word(&mut self, strip_tabs: bool) {
        while self.peek_is(0, ' ') || self.peek_is(0, '\t') {
            self.pos += 1;
        }
        let start = self.items.get(self.pos).map_or(usize::MAX, |(at, _)| *at);
        let mut delimiter = String::new();
        let mut quoted = false;
        let mut end = start;
        while let Some((at, item)) = self.items.get(self.pos).copied() {
            match item {
                Item::Ref(index) => {
                    self.place(index, Place::Refused(Unsafe::Delimiter));
                    quoted = true;
                }
                Item::Char(c) if " \t\n;&|<>()".contains(c) => break,
                Item::Char('\\') => {
                    quoted = true;
                    self.pos += 1;
                    if let Some((at, item)) = self.items.get(self.pos).copied() {
                        match item {
                            Item::Char(c) => delimiter.push(c),
                            Item::Ref(index) => {
                                self.place(index, Place::Refused(Unsafe::Delimiter))
                            }
                        }
                        end = at + 1;
                    }
                    self.pos += 1;
                    continue;
                }
                Item::Char(quote @ ('\'' | '"')) => {
                    quoted = true;
                    self.pos += 1;
                    let mut closed = false;
                    while let Some((at, item)) = self.items.get(self.pos).copied() {
                        self.pos += 1;
                        end = at + 1;
                        match item {
                            Item::Char(c) if c == quote => {
                                closed = true;
                                break;
                            }
                            Item::Char(c) => delimiter.push(c),
                            Item::Ref(index) => {
                                self.place(index, Place::Refused(Unsafe::Delimiter))
                            }
                        }
                    }
                    if !closed {
                        self.unfollowable(Unfollowable::Unclosed("'"));
                    }
                    continue;
                }
                Item::Char(c) => delimiter.push(c),
            }
            end = at + 1;
            self.pos += 1;
        }
        if start == usize::MAX || end == start {
            return;
        }
        self.found.heredocs.push(HereDoc {
            delimiter,
            quoted,
            strip_tabs,
            in_backticks: self.in_backticks,
            word: start..end,
            body: 0..0,
            references: Vec::new(),
        });
        self.pending.push(self.found.heredocs.len() - 1);
    }

    /// At a newline of commands: the bodies of the here-documents started on its line.
    fn heredoc_bodies(&mut self) {
        let strip_tabs = |items: &[(usize, Item)]| {
            items
                .iter()
                .skip_while(|(_, item)| matches!(item, Item::Char('\t')))
                .map(|(_, item)| match item {
                    Item::Char(c) => Some(*c),
                    Item::Ref(_) => None,
                })
                .collect::<Option<String>>()
        };
        for heredoc in std::mem::take(&mut self.pending) {
            let start = self.pos;
            let delimiter = self.found.heredocs[heredoc].delimiter.clone();
            let mut end = self.items.len();
            let mut resume = self.items.len();
            let mut line_start = self.pos;
            while line_start < self.items.len() {
                let line_end = self.items[line_start..]
                    .iter()
                    .position(|(_, item)| matches!(item, Item::Char('\n')))
                    .map_or(self.items.len(), |n| line_start + n);
                let line = &self.items[line_start..line_end];
                let exact: Option<String> = line
                    .iter()
                    .map(|(_, item)| match item {
                        Item::Char(c) => Some(*c),
                        Item::Ref(_) => None,
                    })
                    .collect();
                let is_end = exact.as_deref() == Some(delimiter.as_str())
                    || (self.found.heredocs[heredoc].strip_tabs
                        && strip_tabs(line).as_deref() == Some(delimiter.as_str()));
                if is_end {
                    end = line_start;
                    resume = (line_end + 1).min(self.items.len());
                    break;
                }
                line_start = line_end + 1;
            }
            let body: Vec<(usize, Item)> = self.items[start..end.max(start)].to_vec();
            self.pos = resume;
            let positions = match (body.first(), body.last()) {
                (Some((first, _)), Some((last, _))) => *first..*last + 1,
                _ => 0..0,
            };
            let references: Vec<usize> = body
                .iter()
                .filter_map(|(_, item)| match item {
                    Item::Ref(index) => Some(*index),
                    Item::Char(_) => None,
                })
                .collect();
            let quoted = self.found.heredocs[heredoc].quoted;
            {
                let record = &mut self.found.heredocs[heredoc];
                record.body = positions;
                record.references = references.clone();
            }
            if quoted {
                for index in references {
                    self.place(index, Place::HereDoc);
                }
            } else {
                let (refusing, arithmetic) = (self.refusing, self.arithmetic);
                let in_backticks = self.in_backticks;
                let mut inner = Lexer::new(body, self.found, in_backticks);
                inner.refusing = refusing;
                inner.arithmetic = arithmetic;
                inner.heredoc_body();
            }
        }
    }

    /// The body of a here-document with an unquoted delimiter: as inside "...", but `"` is text.
    fn heredoc_body(&mut self) {
        while let Some(item) = self.next() {
            match item {
                Item::Char('\\') => self.escaped(),
                Item::Char('$') => self.dollar(true),
                Item::Char('`') => self.backticks(false),
                Item::Ref(index) => self.place(index, Place::HereDoc),
                Item::Char(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(text: &str) -> Result<String, Vec<Unsafe>> {
        let template = Template::parse(text).expect("a template");
        script_command(&template, |n| format!("V{n}"))
            .map(|command| command.text)
            .map_err(|errors| errors.into_iter().map(|e| e.why).collect())
    }

    #[test]
    fn each_quoting_context_gets_its_own_form() {
        let cases = [
            ("echo {{ params.a }}", r#"echo "${V1}""#),
            (r#"echo "x {{ params.a }} y""#, r#"echo "x ${V1} y""#),
            ("echo 'x {{ params.a }} y'", r#"echo 'x '"${V1}"' y'"#),
            ("echo '{{ params.a }}'", r#"echo ''"${V1}"''"#),
            ("a={{ params.a }}b", r#"a="${V1}"b"#),
            (
                "cat <<EOF\n{{ params.a }} \"{{ params.b }}\" '{{ params.c }}'\nEOF\necho {{ params.d }}",
                "cat <<EOF\n${V1} \"${V2}\" '${V3}'\nEOF\necho \"${V4}\"",
            ),
            (
                "cat <<'EOF'\n$HOME \\ `x` {{ params.a }}\nEOF\necho '{{ params.b }}'",
                "cat <<EOF\n\\$HOME \\\\ \\`x\\` ${V1}\nEOF\necho ''\"${V2}\"''",
            ),
            (
                "cat <<-\"END\" | tr a b\n\t{{ params.a }}\n\tEND\n",
                "cat <<-END | tr a b\n\t${V1}\n\tEND\n",
            ),
            (
                "cat <<\\EOF\n{{ params.a }}\nEOF",
                "cat <<EOF\n${V1}\nEOF",
            ),
            // A quoted here-document without references is left as written.
            ("cat <<'EOF'\n$HOME\nEOF", "cat <<'EOF'\n$HOME\nEOF"),
            (
                r#"echo "$(echo '{{ params.a }}' "{{ params.b }}")""#,
                r#"echo "$(echo ''"${V1}"'' "${V2}")""#,
            ),
            (
                "echo `echo '{{ params.a }}' {{ params.b }}`",
                "echo `echo ''\"${V1}\"'' \"${V2}\"`",
            ),
            (
                r#"echo "`echo {{ params.a }} \"{{ params.b }}\"`""#,
                r#"echo "`echo "${V1}" \"${V2}\"`""#,
            ),
            ("echo hi # {{ params.a }}\necho {{ params.b }}", "echo hi # ${V1}\necho \"${V2}\""),
            ("echo a#{{ params.a }}", r#"echo a#"${V1}""#),
            (
                "x=$(case y in y) echo '{{ params.a }}';; esac)\necho \"{{ params.b }}\"",
                "x=$(case y in y) echo ''\"${V1}\"'';; esac)\necho \"${V2}\"",
            ),
            (
                "case $1 in\n  a) echo {{ params.a }};;\nesac",
                "case $1 in\n  a) echo \"${V1}\";;\nesac",
            ),
            ("echo \\$'{{ params.a }}'", r#"echo \$''"${V1}"''"#),
            ("echo \\\\{{ params.a }}", r#"echo \\"${V1}""#),
            ("echo \"\\\\{{ params.a }}\"", r#"echo "\\${V1}""#),
        ];
        for (text, expected) in cases {
            assert_eq!(command(text), Ok(expected.to_owned()), "{text}");
        }
    }

    #[test]
    fn places_where_a_value_cannot_be_exact_are_refused() {
        let cases = [
            ("echo ${X:-{{ params.a }}}", Unsafe::ParameterExpansion),
            ("echo \"${X:-{{ params.a }}}\"", Unsafe::ParameterExpansion),
            ("echo $'a{{ params.a }}'", Unsafe::AnsiC),
            ("echo \\{{ params.a }}", Unsafe::Backslash),
            ("echo \"\\{{ params.a }}\"", Unsafe::Backslash),
            ("cat <<EOF\n\\{{ params.a }}\nEOF", Unsafe::Backslash),
            ("echo `echo \\{{ params.a }}`", Unsafe::Backslash),
            ("echo ${{ params.a }}", Unsafe::Dollar),
            ("echo \"${{ params.a }}\"", Unsafe::Dollar),
            ("cat <<{{ params.a }}\nx\n", Unsafe::Delimiter),
            (
                "echo `cat <<'EOF'\n{{ params.a }}\nEOF\n`",
                Unsafe::HereDocInBackticks,
            ),
            ("cat <<'E-F'\n{{ params.a }}\nE-F", Unsafe::OddDelimiter),
            (
                "echo '{{ params.a }}",
                Unsafe::Unfollowable(Unfollowable::Unclosed("'")),
            ),
            (
                "echo \"{{ params.a }}",
                Unsafe::Unfollowable(Unfollowable::Unclosed("\"")),
            ),
            (
                "echo $(echo {{ params.a }}",
                Unsafe::Unfollowable(Unfollowable::Unclosed("$(")),
            ),
            (
                "echo {{ params.a }})",
                Unsafe::Unfollowable(Unfollowable::UnmatchedParen),
            ),
            (
                "echo $'it\\'s' '{{ params.a }}'",
                Unsafe::Unfollowable(Unfollowable::AnsiCQuote),
            ),
        ];
        for (text, why) in cases {
            assert_eq!(command(text), Err(vec![why]), "{text}");
        }
    }

    #[test]
    fn references_evaluated_as_arithmetic_are_named_to_be_checked() {
        let template = Template::parse(
            "echo {{ params.a }} $(( {{ params.b }} * $(echo '{{ params.c }}') )) \"$(( 1 + {{ params.d }} ))\"",
        )
        .expect("a template");
        assert_eq!(
            script_command(&template, |n| format!("V{n}")),
            Ok(ShellCommand {
                text: r#"echo "${V1}" $(( ${V2} * $(echo ''"${V3}"'') )) "$(( 1 + ${V4} ))""#
                    .into(),
                numbers: vec![2, 3, 4],
            })
        );
    }

    #[test]
    fn a_command_without_references_is_kept_whatever_it_holds() {
        for text in ["echo 'unclosed", "echo $'it\\'s'", "echo )", "true"] {
            assert_eq!(command(text), Ok(text.to_owned()));
        }
    }

    #[test]
    fn every_refused_reference_is_named_with_the_fix() {
        let template = Template::parse("echo ${A:-{{ params.a }}} \\{{ params.b }} {{ params.c }}")
            .expect("a template");
        let errors = script_command(&template, |n| format!("V{n}")).expect_err("refused");
        let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(messages[0].starts_with("`{{ params.a }}` is inside a `${...}` expansion"));
        assert!(messages[1].starts_with("`{{ params.b }}` follows a `\\`"));
        assert!(messages[1].ends_with("remove the backslash"));
    }
}
