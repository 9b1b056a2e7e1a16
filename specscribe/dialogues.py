"""The four dialogues of the conversational evaluation set (specscribe/conversations.py).

Original scripts, one turn a line, "Name: text"; "~" starts a turn over the previous one's end, "..." after a
long pause. Each dialogue carries its speakers' voices and the condition its clip is rendered in.
"""

from specscribe.conversations import CLEAN, NOISY, PHONE, PHONE_NOISY, Dialogue, Speaker

DELIVERY = Dialogue("delivery", PHONE_NOISY, (
    Speaker("Dev", "en-gb+m3", 150, 45), Speaker("Sam", "en-us+f2", 150, 50, piper=True)), """
    Dev: Hi, is this Sam Carter?
    Sam: Yeah, speaking.
    Dev: Hi Sam, it's Dev from Northway Deliveries. I have your parcel.
    Sam: Oh great, okay.
    Dev: I'm about, uh, ten minutes away from your place.
    Sam: Right. Um, I'm actually not home right now.
    Dev: No problem. Is there a safe place I can leave it?
    Sam: Could you leave it with my neighbour at number 42?
    ~Dev: Sure.
    Dev: What's the neighbour's name?
    Sam: Mrs Patel. She's usually in all afternoon.
    Dev: Okay, number 42, Mrs Patel.
    ~Sam: Mm-hm.
    ...Dev: Sorry, the app is being slow. Okay, got it.
    Sam: Is it the big box or the small one?
    Dev: Just one box, about fifteen kilos.
    Sam: Oh wow. That must be the bookshelf.
    ~Dev: Right.
    Dev: I'll send you a photo when it's dropped off.
    Sam: Perfect, thanks so much.
    Dev: No worries. Have a good one.
    ~Sam: You too, bye.""")

MEETING = Dialogue("meeting", CLEAN, (
    Speaker("Priya", "en-gb-x-rp+f2", 160, 60, piper=True), Speaker("Tom", "en-us-nyc+m1", 150, 40)), """
    Priya: Hey Tom, have you got a minute?
    Tom: Sure, what's up?
    Priya: We need to plan the review with the design team.
    Tom: Right. When were you thinking?
    Priya: Maybe Thursday morning, around ten?
    Tom: Hmm, I have a doctor's appointment at ten thirty.
    ~Priya: Oh, okay.
    Priya: What about two o'clock then?
    Tom: Two works for me.
    Priya: Great. Should we book the big room on the third floor?
    Tom: Yeah, the small one gets way too hot.
    ~Priya: True.
    Priya: I'll invite Marcus and Elena as well.
    Tom: Does Elena need the slides beforehand?
    Priya: I think so. Can you send them by Wednesday?
    Tom: I can try. Um, maybe Wednesday evening.
    Priya: That's fine.
    ...Tom: Oh, and should we order lunch?
    Priya: No, it's after lunch. Maybe just coffee.
    ~Tom: Okay, coffee it is.
    Priya: So, Thursday at two, third floor, slides by Wednesday.
    Tom: Got it. I'll put it in the calendar.
    ~Priya: Thanks, Tom.""")

SUPPORT = Dialogue("support", PHONE, (
    Speaker("Anna", "en-us+f4", 150, 50, piper=True), Speaker("Mark", "en-gb-x-rp+m7", 150, 40)), """
    Anna: Thanks for calling Brightline Internet, this is Anna. How can I help?
    Mark: Hi, um, my internet keeps dropping out.
    Anna: I'm sorry to hear that. Can I have your account number?
    Mark: Sure, it's 5 8 3 1 9 0.
    Anna: Thank you, Mark. When did the problem start?
    Mark: About three days ago. It drops every hour or so.
    ~Anna: Okay.
    Anna: Are the lights on the router green right now?
    Mark: Uh, let me check.
    ...Mark: Two are green and one is blinking orange.
    Anna: Right. I'm running a line test now.
    ~Mark: Mm-hm.
    Anna: I can see errors on the line. I'll book an engineer.
    Mark: Oh, okay. When can they come?
    Anna: The first slot is Monday between 8 and 12.
    Mark: Monday morning is fine. Thanks for your help.
    ~Anna: You're welcome. Bye now.""")

RESTAURANT = Dialogue("restaurant", NOISY, (
    Speaker("Jo", "en-029+f3", 155, 55), Speaker("Raf", "en-us+m3", 165, 30, piper=True),
    Speaker("Mia", "en-gb+f4", 155, 60)), """
    Jo: Okay, where are we eating tonight?
    Raf: I could go for pizza.
    Mia: Pizza again? We had pizza on Friday.
    ~Raf: Fair enough.
    Jo: What about that Thai place on King Street?
    Mia: Oh yeah, I love their green curry.
    Raf: Is it expensive though?
    Jo: Not really, like fifteen dollars a plate.
    Raf: Okay, that's fine.
    Mia: Do they take bookings?
    Jo: I think so. I'll call them.
    ~Mia: Sure.
    ...Jo: Right, they have a table for three at seven fifteen.
    Raf: Seven fifteen? Can we make it seven thirty?
    Jo: Um, let me ask.
    ...Jo: Yeah, seven thirty works.
    Mia: Nice. Should we take the bus?
    Raf: I'll drive, I'm not drinking anyway.
    ~Mia: Oh, amazing.
    Jo: So Raf picks us up at seven?
    Raf: Yep, seven sharp.
    Mia: Cool, see you then.
    ~Jo: See you.""")

DIALOGUES = (DELIVERY, MEETING, SUPPORT, RESTAURANT)
