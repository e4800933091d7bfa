//! R: functions bound by `<-`, `=` or `<<-` (a lambda, `\(x)`, bound to a name too), R6 and
//! Reference classes (`Repo <- R6Class("Repo", inherit = Saver, public = list(save =
//! function(item) ..))`: the functions of its `public`, `private`, `active` or `methods`
//! list are its methods), S4 (`setClass`, `setGeneric`, and `setMethod("save", "Repo", ..)`,
//! a method of `Repo`), `obj$m()`, `self$m()` and `private$m()`, and box modules (`box::use(s
//! = ./store)` with `s$helper()`, `box::use(./store[h = helper])`). A receiver is typed by the
//! constructor call `r <- Repo$new()`. An S3 or S4 generic dispatches on its arguments' classes
//! at run time: a call of `save(x)` reaches the generic `save` (said ambiguous when methods
//! share the name), and an S3 method `save.Repo` is a function of that whole name.
//! `source("store.R")` and `library(pkg)` bring in names without naming them: not recorded;
//! `pkg::f()` is a call of `f` qualified by its package, which a workspace only holds under a
//! directory of that name.

use super::{Lang, Rules};

pub const LANGS: &[&Lang] = &[&R];

pub static R: Lang = Lang {
    name: "r",
    extensions: &["R", "r"],
    interpreters: &["Rscript"],
    grammar: || tree_sitter_r::LANGUAGE.into(),
    // The shipped tags query tags every `name <- function` and every call, which gm's does,
    // without classes or methods.
    tags: &[],
    query: &[QUERY],
    rules: Rules {
        self_names: &["self", "private"],
        // An R6 method calls another through `self$`; a bare name is a function.
        implicit_self: false,
        ..Rules::NONE
    },
};

const QUERY: &str = r#"
(binary_operator lhs: (identifier) @name operator: ["<-" "=" "<<-"] rhs: (call function: [(identifier) (namespace_operator)] @ctor arguments: (arguments (argument name: (identifier) @arg value: [(identifier) (string)] @base)?)) (#match? @ctor "(^|:)(R6Class|setRefClass)$") (#any-of? @arg "inherit" "contains")) @definition.class
(call function: [(identifier) (namespace_operator)] @ctor arguments: (arguments (argument name: (identifier) @section value: (call function: (identifier) @list arguments: (arguments (argument name: (identifier) @name value: (function_definition)) @definition.method)))) (#match? @ctor "(^|:)(R6Class|setRefClass)$") (#any-of? @section "public" "private" "active" "methods") (#eq? @list "list"))
(call function: (identifier) @f arguments: (arguments . (argument value: (string (string_content) @name)) (argument name: (identifier) @arg value: (string) @base)? (#eq? @arg "contains")) (#eq? @f "setClass")) @definition.class
(call function: (identifier) @f arguments: (arguments . (argument value: (string (string_content) @name))) (#eq? @f "setGeneric")) @definition.function
(call function: (identifier) @f arguments: (arguments . (argument value: (string (string_content) @name)) (argument value: (string) @owner)) (#eq? @f "setMethod")) @definition.method
(binary_operator lhs: (identifier) @name operator: ["<-" "=" "<<-"] rhs: (function_definition)) @definition.function

(call function: (identifier) @name) @reference.call
(call function: (extract_operator lhs: (_) @receiver operator: "$" rhs: (identifier) @name)) @reference.call
(call function: (namespace_operator lhs: (identifier) @qualifier rhs: (identifier) @name)) @reference.call

(call function: (namespace_operator lhs: (identifier) @box rhs: (identifier) @use) arguments: (arguments (argument !name value: (binary_operator lhs: (identifier) @dot rhs: (identifier)) @import.module) @import) (#eq? @box "box") (#eq? @use "use") (#eq? @dot "."))
(call function: (namespace_operator lhs: (identifier) @box rhs: (identifier) @use) arguments: (arguments (argument name: (identifier) @import.alias value: (binary_operator lhs: (identifier) @dot rhs: (identifier)) @import.module) @import) (#eq? @box "box") (#eq? @use "use") (#eq? @dot "."))
(call function: (namespace_operator lhs: (identifier) @box rhs: (identifier) @use) arguments: (arguments (argument value: (binary_operator lhs: (identifier) @dot rhs: (subset function: (identifier) @import.module arguments: (arguments (argument name: (identifier)? @import.alias value: (identifier) @import.name) @import))))) (#eq? @box "box") (#eq? @use "use") (#eq? @dot "."))

(binary_operator lhs: (identifier) @bind.name operator: ["<-" "=" "<<-"] rhs: (call function: (extract_operator lhs: (identifier) @bind.type operator: "$" rhs: (identifier) @new)) (#eq? @new "new"))
"#;
