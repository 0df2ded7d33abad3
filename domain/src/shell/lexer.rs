//! A small lexer of POSIX `sh` over a template's items: where each reference stands (its
//! [`Place`]), which are evaluated as arithmetic, the here-documents and their bodies, and what
//! cannot be followed at all. The parent module decides from this what each reference becomes.

use std::ops::Range;

use super::{Unfollowable, Unsafe};

/// A character of the template's text, or its `n`th reference (0-based).
#[derive(Clone, Copy, Debug)]
pub(super) enum Item {
    Char(char),
    Ref(usize),
}

/// Where a reference stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
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
pub(super) struct HereDoc {
    /// The delimiter with its quotes removed.
    pub(super) delimiter: String,
    /// Whether any part of the delimiter was quoted, so nothing in the body expands.
    pub(super) quoted: bool,
    /// `<<-`: leading tabs are stripped from the body's lines and the delimiter line.
    pub(super) strip_tabs: bool,
    /// Whether it is inside backticks, whose own backslash rules forbid rewriting it.
    pub(super) in_backticks: bool,
    /// The delimiter word as written after `<<`.
    pub(super) word: Range<usize>,
    /// The body, without the closing delimiter line.
    pub(super) body: Range<usize>,
    /// The references in the body.
    pub(super) references: Vec<usize>,
}

/// What the lexer found.
pub(super) struct Findings {
    pub(super) places: Vec<Option<Place>>,
    /// References inside `$(( ))`, at any depth: what they expand to is evaluated as arithmetic.
    pub(super) numbers: Vec<usize>,
    pub(super) heredocs: Vec<HereDoc>,
    pub(super) unfollowable: Option<Unfollowable>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Frame {
    /// The whole command, or the inside of backticks: ends with the text.
    Top,
    /// The inside of `$( )`: ends at its `)`.
    Paren,
}

/// Reserved words after which a new command starts (for spotting `case`).
pub(super) const OPENERS: [&str; 10] = [
    "then", "do", "else", "elif", "if", "while", "until", "!", "{", "}",
];

/// At the end of an unquoted word: counts `case` (as a command) and `esac`, whose patterns' `)`
/// close nothing, and notes whether the next word starts a command.
pub(super) fn end_word(word: &mut Option<String>, command_start: &mut bool, cases: &mut usize) {
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
pub(super) struct Lexer<'f> {
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
    pub(super) fn new(
        items: Vec<(usize, Item)>,
        found: &'f mut Findings,
        in_backticks: bool,
    ) -> Self {
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
    pub(super) fn code(&mut self, frame: Frame) {
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
